"""scrun-anchor: started by `scrun create`, one per container; not meant to be run by hand.

Its command line and its report to `create` (through --ready-fd) are scrunlib.launch's.
Its exit status is the container's.
"""

from __future__ import annotations

import os
import sys

import scrunlib
from scrunlib import log, siteconfig
from scrunlib.errors import ScrunError, UsageError, internal_error, print_error
from scrunlib.launch import OPTIONS, ReadyPipe
from scrunlib.log import ERROR, INFO, LogSettings
from scrunlib.options import HelpRequested, one_id, parse, usage_text
from scrunlib.spool import SITE_CONFIG_CACHE, Spool, validate_id

from scrun_anchor.creation import Creation

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

USAGE = usage_text(
    "scrun-anchor --root DIR --bundle DIR [OPTIONS] CONTAINER-ID",
    "The per-container process behind `scrun create` (internal: scrun starts one per\n"
    "container; it holds the container's Slurm job, and its exit status is the container's).",
    OPTIONS,
)


def _number(values: dict[str, Any], name: str, default: int) -> int:
    try:
        return int(values.get(name, default))
    except ValueError:
        raise UsageError(f"--{name} takes a number") from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        values, words = parse(sys.argv[1:] if argv is None else argv, OPTIONS, USAGE)
    except HelpRequested as help_request:
        sys.stdout.write(help_request.text)
        return 0
    except UsageError as exc:
        print_error("scrun-anchor", exc.message)
        return 2
    if values.get("version"):
        sys.stdout.write(f"scrun-anchor (scrun) {scrunlib.__version__}\n")
        return 0
    ready = ReadyPipe(_number(values, "ready-fd", -1) if "ready-fd" in values else None)
    try:
        (container_id,) = one_id(words, "scrun-anchor")
        if not values.get("root") or not values.get("bundle"):
            raise UsageError("--root and --bundle are required")
        spool = Spool(values["root"], validate_id(container_id))
        # fd 2 belongs to the container: our lines go to anchor.log, and to the --log file
        # once create has returned (until then create reports; podman wants one line).
        file_level = _number(values, "file-level", ERROR)
        settings = LogSettings(
            stderr=0,
            syslog=_number(values, "syslog-level", 0),
            file=file_level,
            log_format=values.get("log-format", "json"),
            extra_file=spool.log_file,
            extra_level=max(INFO, _number(values, "stderr-level", INFO), file_level),
            program="scrun-anchor",
        )
        log.configure(settings)
        sys.stderr = open(  # noqa: SIM115 - for tracebacks
            spool.log_file, "a", encoding="utf-8", errors="backslashreplace"
        )
        creation = Creation(
            spool=spool,
            bundle_path=values["bundle"],
            config_file=values.get("config"),
            bundle_given=not values.get("bundle-is-cwd"),
            pid_file=values.get("pid-file"),
            console_socket=values.get("console-socket"),
            slurm_conf_option=values.get("slurm-conf"),
            site=siteconfig.load(cache=os.path.join(spool.root, SITE_CONFIG_CACHE)),
            log_file=values.get("log"),
            log_format=settings.log_format,
        )
        created = creation.create()
    except ScrunError as exc:
        ready.error(exc.message)
        return 1
    except Exception as exc:  # a bug: create reports it in one line; anchor.log has the rest
        ready.error(internal_error(exc, traceback=True).message)
        return 1
    ready.created(os.getpid())
    settings.log_file = values.get("log")
    log.configure(settings)
    from scrun_anchor.container import Container  # loaded while salloc ran, as a rule

    code = Container(created).serve()
    # Everything is cleaned up and every log line written (sinks append synchronously);
    # skip the interpreter's teardown: podman is waiting for this exit.
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
