"""`scrun run`: create, start, wait, delete; for people who drive scrun by hand.
Exits with the container's exit code (128+N when a signal N ended it)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from types import FrameType

from scrunlib import protocol
from scrunlib.errors import ScrunError
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.state import ContainerState, shell_exit_code

from scrun_cli.context import CommandContext
from scrun_cli.create import create_container
from scrun_cli.delete import delete_container

OPTIONS = (
    Opt("bundle", "b", value=True, metavar="DIR", help="bundle (default: the current directory)"),
    Opt(
        "pid-file", value=True, metavar="FILE", help="write the container's pid (the anchor's) here"
    ),
    Opt("keep", help="keep the container's state after it exits (no delete)"),
)
USAGE = usage_text(
    "scrun run [OPTIONS] CONTAINER-ID",
    "Run a container in the foreground as a Slurm job and exit with its exit code.\n"
    "Ctrl-C (SIGINT) or SIGTERM stops the container and its job.",
    OPTIONS,
)


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="run")
    (container_id,) = one_id(words, "run")
    anchor = create_container(ctx, container_id, values.get("bundle"), values.get("pid-file"), None)
    spool = ctx.spool(container_id)

    def forward(signum: int, _frame: FrameType | None) -> None:
        os.kill(anchor, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            protocol.request(spool.socket, {"op": "start"})
        except ScrunError:
            delete_container(ctx, spool, ContainerState.load(spool))
            raise
        _, status = os.waitpid(anchor, 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    exit_code = shell_exit_code(os.waitstatus_to_exitcode(status))
    if not values.get("keep"):
        delete_container(ctx, spool, ContainerState.load(spool))
    return exit_code
