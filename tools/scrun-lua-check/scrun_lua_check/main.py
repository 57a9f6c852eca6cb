"""Command line of scrun-lua-check.

Exit status: 0 clean, 1 warnings only, 2 errors (with --strict warnings count as errors), and
2 as well when the check cannot run at all (bad option, unreadable file, bad config), which
is then reported on one line: `scrun-lua-check: error: ...`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any, NoReturn

from scrunlib import admin_output, siteconfig
from scrunlib.errors import ScrunError, UsageError, internal_error
from scrunlib.lua.stage import find_script

from scrun_lua_check.codes import CODES, matches
from scrun_lua_check.config import load_settings, parse_codes
from scrun_lua_check.lint import lint
from scrun_lua_check.luaenv import lua_env
from scrun_lua_check.report import EXIT_ERRORS, Diagnostic, exit_code, render_json, render_text

PROG = "scrun-lua-check"
DESCRIPTION = """\
Check a site's scrun.lua without Slurm: syntax (Lua 5.4), the two hooks and their return
values, the slurm.* API, unchecked and unquoted commands, globals, unused and shadowed
variables. With --dry-run, also run both hooks against a real OCI bundle with commands
recorded instead of run, and show what the script would do."""
EPILOG = """\
exit status: 0 clean, 1 warnings only, 2 errors (or the check could not run);
--strict turns warnings into errors. Silence one line with a comment on it:
  -- scrun-lua-check: ignore W803
Settings: [tool.scrun-lua-check] in ./scrun-lua-check.toml or ./pyproject.toml
(ignore = ["W212"], strict = true, lua51 = true, [[tool.scrun-lua-check.answers]] for the
dry run's answers to commands). Codes: --list-codes."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr (exit 2), not usage + error,
    and an option is only its whole name (`--str` is no `--strict`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files", nargs="*", metavar="FILE",
        help="scrun.lua to check (default: scrun.lua beside the slurm.conf in use)",
    )  # fmt: skip
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="output format (default: text, `file:line:col: CODE message`)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="CODES",
        help="skip these codes or code prefixes (repeatable, comma lists)",
    )
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
    parser.add_argument(
        "--lua51",
        action="store_true",
        help="also report Lua 5.4 names Lua 5.1 lacks (table.unpack, utf8, ...): for a script"
        " Slurm's own scrun may run too, which embeds Lua 5.1 on Debian",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="TOML file with a [tool.scrun-lua-check] table"
    )
    parser.add_argument("--list-codes", action="store_true", help="list all codes and exit")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of an internal error"
    )
    dry = parser.add_argument_group("dry run")
    dry.add_argument(
        "--dry-run",
        action="store_true",
        help="also run both hooks against --bundle and report what they do",
    )
    dry.add_argument("--bundle", metavar="DIR", help="OCI bundle (with config.json) to stage")
    dry.add_argument("--id", default="scrun-lua-check", help="container id passed to the hooks")
    dry.add_argument("--job-id", type=int, default=1, metavar="N", help="job id (default: 1)")
    dry.add_argument("--cluster-name", default="", metavar="NAME", help="slurm.CLUSTER_NAME")
    dry.add_argument(
        "--timeout",
        type=siteconfig.seconds,
        default=60.0,
        metavar="SECONDS",
        help="time limit of each hook (default: 60)",
    )
    dry.add_argument(
        "--execute",
        action="store_true",
        help="really run the commands and write the files (default: record them)",
    )
    return parser


def version() -> str:
    try:
        ours = metadata.version("scrun")
    except metadata.PackageNotFoundError:  # running from a source tree
        ours = "(not installed)"
    return f"{PROG} {ours} ({lua_env().version})"


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.version:
        print(version())
        return 0
    if args.list_codes:
        print("\n".join(f"{code}  {title}" for code, title in CODES.items()))
        return 0
    settings = load_settings(args.config)
    ignore = settings.ignore | parse_codes(args.ignore, "--ignore")
    strict = args.strict or settings.strict
    lua51 = args.lua51 or settings.lua51
    files = args.files or [default_script()]
    if (args.bundle or args.execute) and not args.dry_run:
        raise UsageError("--bundle and --execute need --dry-run")
    if args.dry_run and (not args.bundle or len(files) != 1):
        raise UsageError("--dry-run needs --bundle DIR and exactly one FILE")
    diagnostics: list[Diagnostic] = []
    for path in files:
        found = lint(path, read_source(path), lua51=lua51)
        diagnostics.extend(d for d in found if not matches(d.code, ignore))
    status = exit_code(diagnostics, strict)
    if not args.dry_run:
        emit(args.format, diagnostics, None)
        return status
    from scrun_lua_check.dryrun import DryRunOptions, dry_run, render_dry_run

    options = DryRunOptions(
        bundle=args.bundle,
        container_id=args.id,
        job_id=args.job_id,
        cluster_name=args.cluster_name,
        timeout=args.timeout,
        execute=args.execute,
        answers=settings.answers,
    )
    report = dry_run(files[0], options)
    emit(args.format, diagnostics, report.as_dict())
    if args.format == "text":
        print(render_dry_run(report))
    return max(status, EXIT_ERRORS if report.failed else 0)


def emit(fmt: str, diagnostics: list[Diagnostic], dry_run: dict[str, object] | None) -> None:
    if fmt == "json":
        print(render_json(diagnostics, {"dry_run": dry_run} if dry_run is not None else None))
    elif diagnostics:
        print(render_text(diagnostics))


def default_script() -> str:
    """The scrun.lua that scrun itself would load (beside the slurm.conf in use)."""
    return find_script(siteconfig.load(os.environ).slurm_conf_path(None, os.environ))


def read_source(path: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> NoReturn:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except ScrunError as exc:
        admin_output.error(PROG, exc.message)
        code = EXIT_ERRORS
    except BrokenPipeError:  # `scrun-lua-check ... | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_ERRORS
    except Exception as exc:  # a bug: one line, the traceback only with --debug
        words = sys.argv[1:] if argv is None else argv
        admin_output.error(PROG, internal_error(exc, traceback="--debug" in words).message)
        code = EXIT_ERRORS
    sys.exit(code)


if __name__ == "__main__":
    main()
