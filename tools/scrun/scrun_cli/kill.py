"""`scrun kill [--all] ID [SIGNAL]`: signal the container's processes through Slurm.

A paused container is thawed after the signal (any but SIGSTOP), so that it acts on it:
what docker does itself, and what `podman stop` of a paused container needs to end before
its SIGKILL.

A container that has stopped is not signalled: its anchor has gone, and `kill` fails, as the
OCI runtime spec has it and runc and crun do ("container not running"). With `--all` it
succeeds, as runc's does: containerd's shim sends `kill --all ID 9` after a `--pid host`
container's init has ended. One that is stopping (its anchor ending the tasks and staging
out, or exiting after recording the end) is still one the caller may signal: `podman stop`'s
SIGKILL after its timeout can come then.

The anchor signals the step. One that does not answer within the site's `delete_timeout`
because it cannot act (frozen, stopped, in uninterruptible sleep) is bypassed: the signal
goes to the container's step with scancel from here.
"""

from __future__ import annotations

from scrunlib import log, protocol
from scrunlib.errors import AnchorError, InvalidInput, StateError
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.signals import SIGRTMAX, SIGSTOP, SIGTERM
from scrunlib.state import ContainerState, Status, process_stuck

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OPTIONS = (
    Opt("all", "a", help="signal all processes (always the case); a stopped container is no error"),
)
USAGE = usage_text(
    "scrun kill [--all] CONTAINER-ID [SIGNAL]",
    "Send SIGNAL (a number, or a name with or without SIG; default TERM) to the container.\n"
    "Killing a container that has stopped is an error (with --all it succeeds and does\n"
    "nothing); one that is stopping is no error.",
    OPTIONS,
)


def parse_signal(text: str) -> int:
    """`15`, `TERM`, `SIGTERM`, `sigterm` → 15; anything else is an error."""
    word = text.strip()
    if word.isdigit():
        number = int(word)
        if 1 <= number <= SIGRTMAX:
            return number
        raise InvalidInput(f"invalid signal {text!r}: out of range")
    import signal

    name = word.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise InvalidInput(f"invalid signal {text!r}") from None


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="kill")
    container_id, *rest = one_id(words, "kill", extra="SIGNAL")
    number = parse_signal(rest[0]) if rest else SIGTERM
    spool = ctx.spool(container_id)
    state = ContainerState.load(spool)
    status = state.effective_status()
    if status == Status.STOPPED and not values.get("all") and not state.anchor_alive():
        raise StateError(f"container {container_id!r} is not running: cannot kill")
    if status in (Status.STOPPING, Status.STOPPED):
        # a stopping one's anchor no longer answers: it is ending the container's tasks
        log.debug(f"kill: container {container_id!r} has already stopped or is stopping")
        return 0
    try:
        protocol.request(
            spool.socket, {"op": "kill", "signal": number}, timeout=ctx.site.delete_timeout
        )
    except AnchorError:
        stuck = process_stuck(state.anchor_pid) if state.anchor_alive() else None
        if stuck is None or state.job_id is None:
            raise
        signal_step_directly(ctx, state, number, stuck)
    if state.effective_status() == Status.PAUSED and number != SIGSTOP:
        from scrun_cli.pause import set_paused

        set_paused(ctx, spool, state, paused=False)
    return 0


def signal_step_directly(
    ctx: CommandContext, state: ContainerState, number: int, stuck: str
) -> None:
    """scancel --signal to the container's step(s), found by name as the anchor finds them,
    each Slurm command bounded by `delete_timeout`."""
    from scrunlib.slurm import Slurm  # only on this fault path

    assert state.job_id is not None
    slurm = Slurm(ctx.site, ctx.slurm_conf, timeout=ctx.site.delete_timeout)
    steps = slurm.step_ids(state.job_id, state.step_name)
    for step in steps:
        slurm.cancel(state.job_id, signal=number, step_id=step)
    where = ", ".join(f"{state.job_id}.{step}" for step in steps) or "no running step"
    log.error(
        f"anchor {state.anchor_pid} cannot act (process state {stuck}): signal {number} "
        f"sent with scancel to {where}"
    )
