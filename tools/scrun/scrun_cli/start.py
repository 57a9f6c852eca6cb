"""`scrun start ID`: ask the anchor to launch the container's step. Prints nothing on
success: under podman, start's stdout is the user's terminal."""

from __future__ import annotations

from scrunlib import protocol
from scrunlib.errors import StateError
from scrunlib.options import one_id, parse, usage_text
from scrunlib.state import ContainerState, Status

from scrun_cli.context import CommandContext

TYPE_CHECKING = False  # collections.abc is off the hot path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Sequence

USAGE = usage_text(
    "scrun start CONTAINER-ID",
    "Start the process of a created container (as a step of its Slurm job). A container\n"
    "that is not created (running, paused, stopped) is an error.",
    (),
)


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    _, words = parse(argv, (), USAGE, what="start")
    (container_id,) = one_id(words, "start")
    spool = ctx.spool(container_id)
    state = ContainerState.load(spool)
    status = state.effective_status()
    if status in (Status.STOPPING, Status.STOPPED):
        raise StateError(f"container {container_id!r} has already stopped")
    if status == Status.CREATING:
        raise StateError(f"container {container_id!r} is still being created")
    if status in (Status.RUNNING, Status.PAUSED):
        # the OCI runtime spec's error for a container that is not `created`, runc's and
        # crun's; the anchor itself takes a second start as done
        raise StateError(f"container {container_id!r} is {status}: cannot start")
    protocol.request(spool.socket, {"op": "start"})
    return 0
