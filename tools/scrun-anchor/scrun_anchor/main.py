"""The anchor's two entries, one per container: `run`, which `scrun create` calls in the
child it forks with the Launch it has made (bundle, state, site, log settings as objects),
and `main`, the scrun-anchor command (not meant to be run by hand), which builds the same
Launch from its options and calls `run`.

Its command line and its report to `create` (through --ready-fd) are scrunlib.launch's.
Its exit status is the container's. Logging is configured once, in `run`.
"""

from __future__ import annotations

import os
import sys
import time

import scrunlib
from scrunlib import bundle as bundles
from scrunlib import log, siteconfig
from scrunlib.errors import InvalidInput, ScrunError, UsageError, internal_error, print_error
from scrunlib.launch import OPTIONS, Launch, ReadyPipe, anchor_logging
from scrunlib.log import ERROR, INFO, LogSettings
from scrunlib.options import HelpRequested, one_id, parse, usage_text
from scrunlib.spool import SITE_CONFIG_CACHE, Spool, validate_id
from scrunlib.state import ContainerState

from scrun_anchor.creation import Creation

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

    from scrun_anchor.container import Container

USAGE = usage_text(
    "scrun-anchor --root DIR --bundle DIR [OPTIONS] CONTAINER-ID",
    "The per-container process behind `scrun create` (internal: scrun starts one per\n"
    "container; it holds the container's Slurm job, and its exit status is the container's).",
    OPTIONS,
)


def run(launch: Launch) -> NoReturn:
    """The anchor, in its own process (forked by `scrun create`, or the scrun-anchor
    command): create the container, report to the ready fd, serve it until it ends, and
    exit with its exit code."""
    ready = ReadyPipe(launch.ready_fd)
    log.configure(launch.log)
    sys.stderr = open(  # noqa: SIM115 - for tracebacks
        launch.spool.log_file, "a", encoding="utf-8", errors="backslashreplace"
    )
    try:
        created = Creation(launch, ready).create()
    except ScrunError as exc:
        _failed(launch, ready, exc.message)
    except Exception as exc:  # a bug: create reports it in one line; anchor.log has the rest
        _failed(launch, ready, internal_error(exc, traceback=True).message)
    if launch.log_file:
        try:
            log.open_log_file(launch.log_file)
        except InvalidInput as exc:
            log.error(exc.message)
    from scrun_anchor.container import Container  # loaded while salloc ran, as a rule

    _exit(serve(Container(created)))


def _failed(launch: Launch, ready: ReadyPipe, message: str) -> NoReturn:
    """Creation failed and was undone: report it to create, which removes the spool; or,
    create having gone, remove it here, as nobody else will."""
    ready.error(message)
    if ready.create_gone:
        launch.spool.remove()
    _exit(1)


def serve(container: Container) -> int:
    """The container's exit code once it has ended; 255 (no status known, what conmon
    reports for a lost one) after a bug, which the container's stderr names in one line
    and anchor.log details: `scrun delete` then ends the job and cleans up, as after a
    dead anchor. (Uncaught, the bug would end the container with 1, silently.)"""
    try:
        return container.serve()
    except Exception as exc:  # a bug
        message = internal_error(exc, traceback=True).message
        log.error(message)
        container.stderr.say(f"scrun: error: {message}")
        return 255


def _exit(code: int) -> NoReturn:
    """Everything is cleaned up and every log line written (sinks append synchronously);
    skip the interpreter's teardown: podman is waiting for this exit."""
    sys.stderr.flush()
    os._exit(code)


def _number(values: dict[str, Any], name: str, default: int) -> int:
    try:
        return int(values.get(name, default))
    except ValueError:
        raise UsageError(f"--{name} takes a number") from None


def launch_from_options(values: dict[str, Any], words: list[str], ready_fd: int | None) -> Launch:
    """The Launch that `scrun create` would hand over, built from scrun-anchor's options:
    the bundle, the state create saved and the site configuration read from their files."""
    started = time.monotonic()
    (container_id,) = one_id(words, "scrun-anchor")
    if not values.get("root") or not values.get("bundle"):
        raise UsageError("--root and --bundle are required")
    spool = Spool(values["root"], validate_id(container_id))
    caller = LogSettings(
        stderr=_number(values, "stderr-level", INFO),
        syslog=_number(values, "syslog-level", 0),
        file=_number(values, "file-level", ERROR),
        log_format=values.get("log-format", "json"),
    )
    return Launch(
        spool=spool,
        bundle=bundles.load(values["bundle"], values.get("config")),
        state=ContainerState.load(spool),
        site=siteconfig.load(cache=os.path.join(spool.root, SITE_CONFIG_CACHE)),
        log=anchor_logging(caller, spool.log_file),
        log_file=values.get("log"),
        started=started,
        ready_fd=ready_fd,
        bundle_given=not values.get("bundle-is-cwd"),
        pid_file=values.get("pid-file"),
        console_socket=values.get("console-socket"),
        slurm_conf_option=values.get("slurm-conf"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """scrun-anchor: a thin adapter from its command line to `run`."""
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
    ready_fd = _number(values, "ready-fd", -1) if "ready-fd" in values else None
    try:
        launch = launch_from_options(values, words, ready_fd)
    except ScrunError as exc:
        ReadyPipe(ready_fd).error(exc.message)
        return 1
    run(launch)


if __name__ == "__main__":
    sys.exit(main())
