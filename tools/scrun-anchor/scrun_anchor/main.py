"""scrun-anchor: started by `scrun create`, one per container; not meant to be run by hand.

It reports to `create` through --ready-fd: `created <pid>` once the container is created,
or `error <message>` after it has undone everything. Its exit status is the container's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from scrunlib import log, siteconfig
from scrunlib.errors import ScrunError
from scrunlib.log import INFO, LogSettings
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scrun-anchor",
        description="Per-container process behind `scrun create` (internal; see scrun --help).",
    )
    parser.add_argument("--root", required=True)
    parser.add_argument("--bundle", required=True)
    parser.add_argument(
        "--bundle-is-cwd", action="store_true", help="create was given no --bundle (cwd used)"
    )
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--pid-file")
    parser.add_argument("--console-socket")
    parser.add_argument("--slurm-conf")
    parser.add_argument("--stderr-level", type=int, default=0)
    parser.add_argument("--syslog-level", type=int, default=0)
    parser.add_argument("--file-level", type=int, default=2)
    parser.add_argument("--log")
    parser.add_argument("--log-format", default="json")
    parser.add_argument("--version", action="version", version="scrun-anchor (scrun) 0.1.0")
    parser.add_argument("container_id")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ready = ReadyPipe(args.ready_fd)
    try:
        spool = Spool(args.root, validate_id(args.container_id))
        # fd 2 belongs to the container: our lines go to anchor.log, and to the --log file
        # once create has returned (until then create reports; podman wants one line).
        settings = LogSettings(
            stderr=0,
            syslog=args.syslog_level,
            file=args.file_level,
            log_format=args.log_format,
            extra_file=spool.log_file,
            extra_level=max(INFO, args.stderr_level, args.file_level),
            program="scrun-anchor",
        )
        log.configure(settings)
        sys.stderr = open(spool.log_file, "a", encoding="utf-8")  # noqa: SIM115 - for tracebacks
        anchor = Anchor(
            spool=spool,
            bundle_path=args.bundle,
            bundle_given=not args.bundle_is_cwd,
            pid_file=args.pid_file,
            console_socket=args.console_socket,
            slurm_conf_option=args.slurm_conf,
            site=siteconfig.load(),
            log_file=args.log,
            log_format=args.log_format,
        )
        anchor.create()
    except ScrunError as exc:
        ready.send(f"error {exc.message}")
        return 1
    ready.send(f"created {os.getpid()}")
    settings.log_file = args.log
    log.configure(settings)
    return anchor.serve()


if __name__ == "__main__":
    sys.exit(main())
