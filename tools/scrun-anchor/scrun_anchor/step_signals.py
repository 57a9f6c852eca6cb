"""The engine's signals (`scrun kill`) to a running container's step on the compute nodes.

A step is signalled through Slurm (`scancel --signal` of the step, found by its name), never
at job level: Slurm turns a job-level SIGKILL into a cancel that waits KillWait seconds,
longer than podman waits.

A signal that comes right after `start` waits until the step is SETTLE_SECONDS old. The
anchor answers `start` once the step's srun has started; Slurm then creates the step and the
node's runtime creates the container, whose process starts ~0.1 s after srun on an idle
machine (0.09-0.16 s with the machine's two cores busy). Sent sooner, the signal finds no
process yet, or the container's PID 1 before it has set its handler: the kernel drops a
signal PID 1 does not handle (SIGKILL and SIGSTOP aside), so `podman run -d` followed at
once by `podman stop` waited the whole stop timeout and ended the container with SIGKILL
instead of its handler's exit. Through crun `start` returns once the process runs. SIGKILL
never waits: it ends the container whatever it handles.
"""

from __future__ import annotations

import signal
import time

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.slurm import Slurm
    from scrunlib.state import ContainerState

    from scrun_anchor.channel import ContainerStderr

# Seconds after its srun starts before a step is signalled: several times what the
# container's process takes to start, so that a loaded node is covered too.
SETTLE_SECONDS = 1.0


def settle(signum: int, step_started: float) -> None:
    """Wait until the step started (time.monotonic()) at `step_started` is SETTLE_SECONDS
    old, unless `signum` is SIGKILL."""
    if signum != signal.SIGKILL:
        time.sleep(max(0.0, step_started + SETTLE_SECONDS - time.monotonic()))


def signal_step(slurm: Slurm, state: ContainerState, stderr: ContainerStderr, signum: int) -> None:
    """Signal the container's step, found by its name. A new allocation whose step is not
    listed (yet, or any more) gets the signal at job level instead; a job the container
    joined is not ours to signal. A step Slurm says is not running (a suspended job) keeps
    the signal: the user is told, and the engine's `kill` succeeds, as a frozen
    container's does through crun. SlurmError when Slurm cannot be asked."""
    job_id = state.job_id
    if job_id is None:
        return
    steps = slurm.step_ids(job_id, state.step_name)
    for step_id in steps:
        if not slurm.cancel(job_id, signal=signum, step_id=step_id):
            stderr.say(
                f"scrun: signal {signum} not delivered to container {state.id}: Slurm "
                f"says its step {job_id}.{step_id} is not running (a suspended job)"
            )
    if not steps and not state.existing_job:
        slurm.cancel(job_id, signal=signum)
