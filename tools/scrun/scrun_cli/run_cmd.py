"""`scrun run`: create, start, wait, delete; for people who drive scrun by hand.
Exits with the container's exit code (128+N when a signal N ended it); with `-d`, once the
container runs (its job and anchor go on; `scrun delete` ends them)."""

from __future__ import annotations

import signal
from types import FrameType

from scrunlib import protocol
from scrunlib.errors import ScrunError
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, shell_exit_code

from scrun_cli import create
from scrun_cli.context import CommandContext
from scrun_cli.delete import delete_container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OPTIONS = (
    *create.OPTIONS,
    Opt("detach", "d", help="return once the container runs (`scrun delete` cleans up)"),
    Opt("keep", help="keep the container's state after it exits (no delete)"),
    Opt("no-subreaper", ignored=True),  # the anchor, our child, is what we wait for
)
USAGE = usage_text(
    "scrun run [OPTIONS] CONTAINER-ID",
    "Run a container in the foreground as a Slurm job and exit with its exit code.\n"
    "Ctrl-C (SIGINT) or SIGTERM stops the container and its job. With process.terminal\n"
    "and no --console-socket, the container gets this terminal (as crun does).",
    OPTIONS,
)


def _start(ctx: CommandContext, spool: Spool) -> None:
    """Start the created container; if that fails, delete it (nothing is left)."""
    try:
        protocol.request(spool.socket, {"op": "start"})
    except ScrunError:
        delete_container(ctx, spool, ContainerState.load(spool), force=False)
        raise


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="run")
    (container_id,) = one_id(words, "run")
    anchor = create.create_container(ctx, container_id, values, foreground=not values.get("detach"))
    spool = ctx.spool(container_id)
    if values.get("detach"):
        _start(ctx, spool)
        return 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        anchor.signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _start(ctx, spool)
        status = anchor.wait_ended()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    exit_code = shell_exit_code(status)
    if not values.get("keep"):
        delete_container(ctx, spool, ContainerState.load(spool), force=False)
    return exit_code
