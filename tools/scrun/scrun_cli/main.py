"""scrun: an OCI runtime that runs each container as a Slurm job.

    scrun [GLOBAL OPTIONS] COMMAND [COMMAND OPTIONS] CONTAINER-ID [ARGS]

Global options end at the command word. Each command lives in its own module and is
imported only when used, so `scrun state` stays cheap.
"""

from __future__ import annotations

import os
import sys

from scrunlib import log
from scrunlib.errors import ScrunError, UsageError, internal_error
from scrunlib.log import DEBUG, LogSettings
from scrunlib.options import HelpRequested, Opt, parse, usage_text
from scrunlib.ownership import restrict_umask

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

COMMANDS = {
    "create": "create a container: allocate its Slurm job and stage it (does not run it)",
    "start": "run the created container's process as a job step",
    "state": "print the container's OCI state as JSON",
    "kill": "send a signal to the container's processes",
    "exec": "run another process in the running container (a step of its job)",
    "pause": "freeze the container's processes on its nodes (its job keeps its allocation)",
    "resume": "thaw the processes `pause` froze",
    "ps": "list the container's processes on its nodes (ps there, with a NODE column)",
    "update": "shorten the container's Slurm time limit (no other resource can change)",
    "delete": "end the container's job and remove everything scrun kept for it",
    "run": "create, start and wait for a container; exit with its exit code",
    "list": "list the containers under the root, with their Slurm jobs and nodes",
    "features": "print what scrun supports as JSON (runc's `features` document)",
    "version": "print scrun's, the OCI spec's and Slurm's versions",
}

# commands whose module is named otherwise (so as not to shadow a Python builtin)
MODULES = {"run": "run_cmd", "exec": "exec_cmd"}

# runc/crun commands a client may try: a clear "no" instead of "unknown command".
NOT_SUPPORTED = {
    "checkpoint": "a Slurm job step cannot be checkpointed through scrun",
    "restore": "a Slurm job step cannot be checkpointed through scrun",
    "spec": "not implemented",
    "events": "not implemented",
}

GLOBAL_OPTIONS = (
    Opt("root", value=True, metavar="DIR", help="directory for container state (see above)"),
    Opt("log", value=True, metavar="FILE", help="also write log lines to this file"),
    Opt("log-format", value=True, metavar="FORMAT", help="of the --log file: json or text"),
    Opt("debug", help="log debug lines to stderr"),
    Opt("verbose", "v", repeat=True, help="raise the stderr log level (repeatable)"),
    Opt(
        "slurm-conf", "f", value=True, metavar="FILE", help="slurm.conf (default: SLURM_CONF, site)"
    ),
    Opt("version", "V", help="print the version and exit"),
    Opt("usage", help="print a short usage and exit"),
    Opt("systemd-cgroup", ignored=True),
    Opt("cgroup-manager", value=True, ignored=True),
    Opt("rootless", value=True, ignored=True),
    Opt("criu", value=True, ignored=True),
    Opt("log-level", value=True, ignored=True),
)

SYNOPSIS = "scrun [GLOBAL OPTIONS] COMMAND [OPTIONS] CONTAINER-ID"
DESCRIPTION = (
    """\
An OCI container runtime for Slurm: podman and docker call it as they call runc or crun;
each container becomes a Slurm job, staged by the site's scrun.lua and run with
`srun --container`.

commands:
"""
    + "\n".join(f"  {name:<9} {text}" for name, text in COMMANDS.items())
    + """

Run `scrun COMMAND --help` for a command's options. Default --root: $XDG_RUNTIME_DIR/scrun
when set and non-empty, else /run/user/<uid>/scrun. Logging: SCRUN_DEBUG,
SCRUN_STDERR_DEBUG, SCRUN_SYSLOG_DEBUG, SCRUN_FILE_DEBUG = quiet|fatal|error|info|verbose|
debug|debug2..debug5. Site configuration: $SCRUN_SITE_CONFIG, <prefix>/etc/scrun/scrun.toml,
/etc/scrun/scrun.toml."""
)
USAGE = usage_text(SYNOPSIS, DESCRIPTION, GLOBAL_OPTIONS)
SHORT_USAGE = f"usage: {SYNOPSIS}\ncommands: {', '.join(COMMANDS)}\n"


def _normalise_rootless(argv: list[str]) -> list[str]:
    """runc takes `--rootless VALUE`, others a bare `--rootless`: accept both."""
    result = []
    for index, word in enumerate(argv):
        if word == "--rootless":
            following = argv[index + 1] if index + 1 < len(argv) else ""
            if following.lower() not in ("true", "false", "auto"):
                word = "--rootless=true"
        result.append(word)
    return result


def _context(values: dict[str, Any]) -> CommandContext:
    environ = dict(os.environ)
    settings = LogSettings.from_env(environ)
    settings.stderr = min(settings.stderr + values.get("verbose", 0), 9)  # each -v: one level
    if values.get("debug"):
        settings.stderr = max(settings.stderr, DEBUG)
    log_format = str(values.get("log-format") or "json").lower()
    if log_format not in ("json", "text"):
        raise UsageError(f"unknown log format {log_format!r}: expected json or text")
    settings.log_format = log_format
    settings.log_file = str(values["log"]) if values.get("log") else None
    log.configure(settings)
    return CommandContext(
        root_option=str(values["root"]) if values.get("root") else None,
        slurm_conf_option=str(values["slurm-conf"]) if values.get("slurm-conf") else None,
        log_settings=settings,
        environ=environ,
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = _normalise_rootless(list(sys.argv[1:] if argv is None else argv))
    restrict_umask()
    # a traceback only for `--debug` among the global options (before the command word)
    debug = "--debug" in words[: next((i for i, w in enumerate(words) if w in COMMANDS), None)]
    try:
        # Logging is configured once, from SCRUN_*DEBUG and the global options (-v, --debug,
        # --log); the notes on global options ignored wait for it.
        ignored: list[str] = []
        values, rest = parse(words, GLOBAL_OPTIONS, USAGE, stop_at_first_word=True, ignored=ignored)
        if values.get("version"):
            rest = ["version"]
        elif values.get("usage"):
            sys.stdout.write(SHORT_USAGE)
            return 0
        ctx = _context(values)
        for note in ignored:
            log.debug(note)
        if not rest:
            raise UsageError("no command given (try `scrun --help`)")
        command = rest[0].lower()
        if command in NOT_SUPPORTED:
            raise ScrunError(f"scrun does not support {command!r}: {NOT_SUPPORTED[command]}")
        if command not in COMMANDS:
            raise UsageError(f"unknown command {rest[0]!r} (commands: {', '.join(COMMANDS)})")
        name = f"scrun_cli.{MODULES.get(command, command)}"
        module = __import__(name, fromlist=["run"])  # the command's module, imported now
        code: int = module.run(ctx, rest[1:])
        return code
    except HelpRequested as help_request:
        sys.stdout.write(help_request.text)
        return 0
    except ScrunError as exc:
        log.error(exc.message)
        return exc.exit_code
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except Exception as exc:  # a bug: one line, never a traceback unless asked for
        error = internal_error(exc, traceback=debug)
        log.error(error.message)
        return error.exit_code


def entry() -> NoReturn:
    """The `scrun` command: main(), then exit without the interpreter's teardown, on every call
    podman makes (its cost: lint_tree/hotpath.py). Log lines are written as they happen;
    only stdout and stderr can still hold buffered output."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the reader has gone (a closed pipe): the output is lost
        code = code or 1
    os._exit(code)


if __name__ == "__main__":
    entry()
