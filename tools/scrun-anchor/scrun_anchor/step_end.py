"""Why a container's step ended, said to the user in one line when the container did not
end it itself: Slurm ended its job (a time limit, scancel), or the step failed at its
launch because the job's nodes cannot see what it runs (scrunlib.nodecheck), or it failed
on its node; and the exit code of a step the cgroup OOM killer hit."""

from __future__ import annotations

import os
import signal
import time

from scrunlib import log, nodecheck
from scrunlib.errors import SlurmError
from scrunlib.slurm_commands import remote_command_argv

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.bundle import NodeBundle
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.slurm import Slurm
    from scrunlib.state import ContainerState

    from scrun_anchor.channel import ContainerStderr

# The states a job Slurm ended is left in, as `scontrol show job` says them.
ENDED_BY_SLURM = ("TIMEOUT", "CANCELLED", "FAILED", "NODE_FAIL", "PREEMPTED", "DEADLINE")
# srun's status for a step the cgroup OOM killer ended, or one that failed on its node: a
# plain failure, not 128+9
SRUN_FAILED = 1


def accounted_status(
    slurm: Slurm, state: ContainerState, site: SiteConfig, status: int, stderr: ContainerStderr
) -> int:
    """srun's 1 is Slurm's mark, not the container's code, when accounting records the
    step as OUT_OF_MEMORY (the cgroup OOM killer hit it, whichever process was killed):
    the code is then the one the step's nodes kept (the container's main process's,
    scrunlib.exit_record), else 137, what the OOM killer sent (as crun reports it). A step
    recorded NODE_FAIL (slurmstepd could not start it on its node, or the node failed)
    keeps its 1, and the user reads why in one line (`state.error`). `status` otherwise."""
    if status != SRUN_FAILED:
        return status
    job_id, step_name = state.job_id or 0, state.step_name
    step = slurm.recorded_step(job_id, step_name)
    if step is not None and step.state == "NODE_FAIL":
        state.error = (
            f"container {state.id}'s step {job_id}.{step.step_id} failed on its node "
            f"{step.nodes} (Slurm records NODE_FAIL; that node's slurmd log says why)"
        )
        log.error(state.error)
        stderr.say(f"scrun: error: {state.error}")
    if step is None or step.state != "OUT_OF_MEMORY":
        return status
    code = slurm.recorded_exit_code(job_id, step, site.step_grace + 10)
    if code is None:
        log.verbose(f"step {job_id}.{step.step_id} ran out of memory; no exit code kept")
        return -signal.SIGKILL
    log.verbose(f"step {job_id}.{step.step_id} ran out of memory; its exit code: {code}")
    return code


def report_job_end(slurm: Slurm, state: ContainerState, stderr: ContainerStderr) -> None:
    """Say why, when Slurm (not the container) ended the step of a job of the container's
    own: time limit, scancel. `state.error` says it too."""
    if state.existing_job or state.job_id is None:
        return
    job_id = state.job_id
    deadline = time.monotonic() + 2.0
    try:
        job_state = slurm.job_record(job_id).get("JobState", "")
        # An ending job shows COMPLETING for a moment before it says how it ended.
        while job_state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.1)
            job_state = slurm.job_record(job_id).get("JobState", "")
    except SlurmError:
        return
    if job_state in ENDED_BY_SLURM:
        state.error = f"job {job_id} ended by Slurm: {job_state}"
        log.error(state.error)
        stderr.say(f"scrun: {state.error}")  # in place of slurmstepd's banner


def explain_failed_launch(
    slurm: Slurm,
    state: ContainerState,
    run_bundle: NodeBundle,
    stderr: ContainerStderr,
    site: SiteConfig,
) -> None:
    """Say in one line what the job's nodes cannot see, when that is why the step failed:
    a check run on them (scrunlib.nodecheck) tells. `state.error` says it too."""
    oci_conf = os.path.join(os.path.dirname(slurm.slurm_conf), "oci.conf")
    try:
        with open(oci_conf, encoding="utf-8", errors="replace") as stream:
            runtime_dir = nodecheck.uses_runtime_dir(stream.read())
    except OSError:
        runtime_dir = False
    script = nodecheck.check_script(run_bundle.path, state.rootfs, runtime_dir=runtime_dir)
    argv = remote_command_argv(slurm.path("srun"), state.job_id or 0, script, "scrun-check")
    try:
        _, output, _ = slurm.run(argv, timeout=site.step_grace + 10)
    except SlurmError as exc:
        log.verbose(f"could not check the nodes: {exc.message}")
        return
    message = nodecheck.diagnosis(output, run_bundle.path, state.rootfs)
    if message is not None:
        state.error = message
        log.error(message)
        stderr.say(f"scrun: error: {message}")  # the one line the user sees
