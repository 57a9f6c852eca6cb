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

A SIGKILL goes to the node's runtime first where it can (kill_on_node): `<runtime> kill
<name> KILL` in one step beside the container's, on its node. Slurm's own SIGKILL of a step
reaches every process of it at once; when the task (scrun-cdi-run, or the runtime) ends
before the container's processes, slurmstepd finds its step's processes still there, sleeps
a second and looks again, and srun ends ~1.0 s after the kill (a third of the tries or more;
else in ~0.03 s). Killed by its runtime, the container's process ends first, the runtime
and the task after it, and srun ends ~0.05 s after that step. The container's end, its
stage-out and exit code are as before (137); Slurm records the step FAILED, not CANCELLED.
"""

from __future__ import annotations

import signal
import time

from scrunlib import log
from scrunlib.errors import ScrunError, SlurmError

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.slurm import Slurm
    from scrunlib.state import ContainerState

    from scrun_anchor.channel import ContainerStderr

# Seconds after its srun starts before a step is signalled: several times what the
# container's process takes to start, so that a loaded node is covered too.
SETTLE_SECONDS = 1.0
# Seconds a step may outlive its container's process, killed by the node's runtime, before
# Slurm's SIGKILL goes to all of it: srun ends ~0.05 s after the kill; a task of more
# processes than the runtime's kill reached (more tasks, a container without a pid
# namespace of its own) ends then, a second later.
NODE_KILL_PATIENCE = 1.0
# Seconds a step may outlive Slurm's SIGKILL before it is taken for lost (its job is then
# cancelled): Slurm delivers a signal to a step in well under a second, and podman waits
# 5 s for a killed container's end.
SIGKILL_PATIENCE = 2.0
# Seconds the step that runs the node's `<runtime> kill` may take (~0.05 s; slurmctld gone,
# srun would retry for minutes): past them, or when it fails, Slurm's own SIGKILL is sent.
NODE_KILL_TIMEOUT = 3.0


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


class StepKill:
    """The engine's SIGKILL to the running step, until the step ends (the container's loop
    asks `escalate()` and sleeps at most `seconds_to_next()`). `request()` only notes it:
    `escalate()` sends it once `kill` has been answered (the node's kill is a step to
    launch, which the engine's `kill` need not wait for), first through the node's runtime
    (kill_on_node), where it can be sent; Slurm's SIGKILL to the step at once where it
    cannot, or NODE_KILL_PATIENCE seconds after it, where the step outlived it. A SIGKILL
    Slurm refuses (slurmctld gone) is final too: the step is lost (`escalate()`)
    SIGKILL_PATIENCE seconds after Slurm's SIGKILL, and the container ends its job."""

    def __init__(
        self, slurm: Slurm, state: ContainerState, site: SiteConfig, stderr: ContainerStderr
    ) -> None:
        self.slurm, self.state, self.site, self.stderr = slurm, state, site, stderr
        # time.monotonic() when the node's runtime killed the container's process, and
        # when Slurm's SIGKILL went to the step
        self.on_node_at: float | None = None
        self.through_slurm_at: float | None = None
        self.requested = False  # and not sent yet

    def request(self) -> None:
        """The engine asked for a SIGKILL: `escalate()` sends it."""
        self.requested = True

    def _send(self) -> None:
        """The engine's SIGKILL: through the node's runtime the first time, where it can; one
        more while that kill has its NODE_KILL_PATIENCE seconds (`podman rm -f` after
        `podman kill`) adds nothing. Slurm that cannot be asked for the step (slurmctld
        gone) is not asked again now: the step is lost SIGKILL_PATIENCE seconds later, as
        after Slurm's SIGKILL."""
        if self.through_slurm_at is None:
            if self.on_node_at is not None:
                return
            try:
                if kill_on_node(self.slurm, self.state, self.site):
                    self.on_node_at = time.monotonic()
                    return
            except SlurmError as exc:
                log.error(exc.message)
                self.through_slurm_at = time.monotonic()
                return
        self._through_slurm()

    def escalate(self) -> bool:
        """Slurm's SIGKILL, once the step outlived the node's NODE_KILL_PATIENCE seconds;
        whether the step is lost: it outlived Slurm's SIGKILL_PATIENCE seconds. A SIGKILL
        requested is sent first."""
        if self.requested:
            self.requested = False
            self._send()
        now = time.monotonic()
        if self.through_slurm_at is None:
            if self.on_node_at is not None and now - self.on_node_at >= NODE_KILL_PATIENCE:
                self._through_slurm()  # more processes than the runtime's kill reached
            return False
        return now - self.through_slurm_at >= SIGKILL_PATIENCE

    def seconds_to_next(self, otherwise: float) -> float:
        """How long the loop may sleep before `escalate()` has something to do: `otherwise`,
        or less until Slurm's SIGKILL is due after the node's (none for one requested)."""
        if self.requested:
            return 0.0
        if self.on_node_at is None or self.through_slurm_at is not None:
            return otherwise
        return min(otherwise, max(0.0, self.on_node_at + NODE_KILL_PATIENCE - time.monotonic()))

    def _through_slurm(self) -> None:
        try:
            signal_step(self.slurm, self.state, self.stderr, signal.SIGKILL)
        except SlurmError as exc:
            log.error(exc.message)
        if self.through_slurm_at is None:
            self.through_slurm_at = time.monotonic()


def kill_on_node(slurm: Slurm, state: ContainerState, site: SiteConfig) -> bool:
    """Send SIGKILL to the container's process through the node's runtime (see the module's
    docstring): True once `<runtime> kill` succeeded on its node. False, and nothing sent,
    where it cannot: a node command of another form than `<runtime> exec %o <name>` (the
    site's exec_command, or the one derived from oci.conf), a job of more than one node, a
    step not listed (or more than one), or that kill failing (the runtime has not created
    the container yet, say). SlurmError when Slurm cannot be asked for the step."""
    # a rare branch: what it imports (re, shlex, json) is no other request's cost
    from scrunlib import exec_process
    from scrunlib.slurm_commands import exec_argv

    try:
        template = exec_process.site_template(site.exec_command, slurm.slurm_conf)
    except ScrunError:
        return False
    kill = exec_process.kill_template(template)
    job_id, node = state.job_id, state.nodes or ""
    if kill is None or job_id is None or not node or any(mark in node for mark in ",[ "):
        return False
    steps = slurm.step_ids(job_id, state.step_name)
    if len(steps) != 1:
        return False
    values = exec_process.task_values(node, state.owner, job_id, steps[0])
    try:
        command = exec_process.expand_patterns(kill, values, template)
    except ScrunError:
        return False
    argv = exec_argv(slurm.path("srun"), job_id, node, command, pty=False)
    try:
        code, _, _ = slurm.run(argv, timeout=NODE_KILL_TIMEOUT)
    except SlurmError:
        return False
    return code == 0
