"""`scrun pause ID` / `scrun resume ID`: freeze and thaw the container's processes on its
compute nodes (scrunlib.container_steps), and say so in its state: `paused` is a marker
file in the spool beside state.json, which only the anchor writes.

Pausing a paused container, or resuming a running one, succeeds and does nothing: the
engines keep their own record and may ask twice (docker resumes a paused container it has
just killed).
"""

from __future__ import annotations

import os

from scrunlib import log
from scrunlib.errors import ScrunError, StateError, reason
from scrunlib.options import one_id, parse, usage_text
from scrunlib.spool import Spool
from scrunlib.state import TRANSITIONS, ContainerState, Status

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

PAUSE_USAGE = usage_text(
    "scrun pause CONTAINER-ID",
    "Freeze the container's processes on its nodes (scancel --signal=STOP on its steps);\n"
    "its Slurm job keeps running and holding its allocation. `scrun resume` thaws them.",
    (),
)
RESUME_USAGE = usage_text(
    "scrun resume CONTAINER-ID",
    "Thaw the processes `scrun pause` froze (scancel --signal=CONT on its steps).",
    (),
)


def set_paused(ctx: CommandContext, spool: Spool, state: ContainerState, paused: bool) -> None:
    """Freeze or thaw the container's steps, then record it (the marker follows the
    processes: it is written once they are frozen, removed once they are thawed)."""
    from scrunlib.container_steps import container_steps, set_frozen, where
    from scrunlib.slurm import Slurm

    slurm = Slurm(ctx.site, ctx.slurm_conf)
    steps = container_steps(slurm, state)
    set_frozen(slurm, state, steps, paused)
    try:
        if paused:
            with open(spool.paused_file, "x", encoding="utf-8") as marker:
                marker.write(" ".join(str(step) for step in steps) + "\n")
        else:
            os.unlink(spool.paused_file)
    except (FileExistsError, FileNotFoundError):
        pass  # another pause or resume did it first
    except OSError as exc:
        raise ScrunError(f"cannot record the pause in {spool.path}: {reason(exc)}") from exc
    log.verbose(f"{'paused' if paused else 'resumed'} {where(state, steps)}")


def change(ctx: CommandContext, argv: Sequence[str], target: str) -> int:
    usage = PAUSE_USAGE if target == Status.PAUSED else RESUME_USAGE
    command = "pause" if target == Status.PAUSED else "resume"
    _, words = parse(argv, (), usage, what=command)
    (container_id,) = one_id(words, command)
    spool = ctx.spool(container_id)
    state = ContainerState.load(spool)
    status = state.effective_status()
    if status == target:
        return 0
    source = Status.RUNNING if target == Status.PAUSED else Status.PAUSED
    if status != source or target not in TRANSITIONS[source] or state.job_id is None:
        raise StateError(f"container {container_id!r} is {status}: cannot {command}")
    if target == Status.PAUSED and state.step_pid is None:
        waiting = "waits in the queue" if state.job_state == "PENDING" else "is being staged"
        raise StateError(
            f"container {container_id!r} has no process to pause yet: job {state.job_id} {waiting}"
        )
    set_paused(ctx, spool, state, target == Status.PAUSED)
    return 0


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    return change(ctx, argv, Status.PAUSED)
