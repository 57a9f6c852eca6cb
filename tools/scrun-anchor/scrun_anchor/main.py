"""scrun-anchor: started by `scrun create`, one per container; not meant to be run by hand.

It reports to `create` through --ready-fd: `created <pid>` once the container is created,
or `error <message>` after it has undone everything. Its exit status is the container's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import scrunlib
from scrunlib import log, siteconfig
from scrunlib.errors import ScrunError, UsageError
from scrunlib.log import ERROR, INFO, LogSettings
from scrunlib.options import HelpRequested, Opt, one_id, parse, usage_text
from scrunlib.spool import Spool, validate_id

from scrun_anchor.anchor import Anchor


class ReadyPipe:
    """The one-shot report to the waiting `scrun create`."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def send(self, message: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, message.encode() + b"\n")
        except OSError:
            pass  # create has gone away; nothing to tell
        finally:
            os.close(self.fd)
            self.fd = None


OPTIONS = (
    Opt("root", value=True, help="the runtime root holding the spool directory"),
    Opt("bundle", value=True, help="the bundle create was given"),
    Opt("bundle-is-cwd", help="create was given no --bundle (its cwd is used)"),
    Opt("config", value=True, help="crun's --config: this file instead of config.json"),
    Opt("ready-fd", value=True, help="report `created <pid>` or `error <msg>` here"),
    Opt("pid-file", value=True, help="write our pid here once created"),
    Opt("console-socket", value=True, help="send the pty master here"),
    Opt("slurm-conf", value=True, help="slurm.conf (scrun -f)"),
    Opt("stderr-level", value=True, help="scrun's stderr level (for anchor.log)"),
    Opt("syslog-level", value=True, help="syslog level"),
    Opt("file-level", value=True, help="--log file level"),
    Opt("log", value=True, help="the caller's --log file (used once created)"),
    Opt("log-format", value=True, help="json or text"),
    Opt("version", help="print the version and exit"),
)
USAGE = usage_text(
    "scrun-anchor --root DIR --bundle DIR [OPTIONS] CONTAINER-ID",
    "The per-container process behind `scrun create` (internal: started by scrun, one per\n"
    "container; its exit status is the container's). getopt, not argparse: it starts on\n"
    "every container's critical path.",
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
        sys.stderr.write(f"scrun-anchor: error: {exc.message}\n")
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
        sys.stderr = open(spool.log_file, "a", encoding="utf-8")  # noqa: SIM115 - for tracebacks
        anchor = Anchor(
            spool=spool,
            bundle_path=values["bundle"],
            config_file=values.get("config"),
            bundle_given=not values.get("bundle-is-cwd"),
            pid_file=values.get("pid-file"),
            console_socket=values.get("console-socket"),
            slurm_conf_option=values.get("slurm-conf"),
            site=siteconfig.load(),
            log_file=values.get("log"),
            log_format=settings.log_format,
        )
        anchor.create()
    except ScrunError as exc:
        ready.send(f"error {exc.message}")
        return 1
    ready.send(f"created {os.getpid()}")
    settings.log_file = values.get("log")
    log.configure(settings)
    code = anchor.serve()
    # Everything is cleaned up and every log line written (sinks append synchronously);
    # skip the interpreter's teardown: podman is waiting for this exit.
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
