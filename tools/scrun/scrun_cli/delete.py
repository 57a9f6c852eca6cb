"""`scrun delete [--force] ID`: end the container's job and remove all scrun kept for it.

Always forced (a running container is stopped first) and idempotent: `--force` on an
unknown id succeeds, as podman's and containerd's cleanups need. The normal case (the
anchor has already staged out, ended the job and exited) touches no Slurm command and no
Lua at all. After an anchor that died first, delete ends its step (its srun here, its
tasks in Slurm, until squeue lists none), runs scrun.lua's stage-out for it (a failure is
reported, the delete goes on) and ends its job. A task that outlives its cancel (it ignores
SIGKILL: until Slurm gives up on it) would write on while its files were copied: the
stage-out is then left to a process of ours that runs it once Slurm lists the step no more,
and removes the spool; the delete itself completes.

An anchor that cannot act (frozen by a cgroup freezer, stopped, or in uninterruptible sleep
on a hung filesystem) ignores even SIGKILL until it is woken. delete waits for it the site's
`delete_timeout` seconds, then ends the container's job itself and says so in one line,
ending in strerror(EBUSY) as a C runtime reports a frozen container it cannot remove; the
spool directory stays for a later `delete`, which finishes once the anchor has gone. Plain
`delete` then fails; `delete --force` succeeds, as crun's does with a frozen container: the
engine (podman, containerd: they always force) can go on, and the job is ended.

`--regex` is crun's: the id is a regular expression, and every container under the root
whose id it matches (anywhere in the id) is deleted, one failure not stopping the others.
"""

from __future__ import annotations

import os

from scrunlib import log
from scrunlib.errors import ContainerNotFound, ScrunError, SlurmError, UsageError
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.processes import fork, pid_ends_within
from scrunlib.signals import SIGKILL, SIGTERM
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, process_alive, process_stuck

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrunlib.slurm import Slurm

OPTIONS = (
    Opt(
        "force",
        "f",
        help="succeed even if the container does not exist or its anchor cannot be stopped",
    ),
    Opt("regex", "r", help="CONTAINER-ID is a regular expression: delete all it matches"),
)
# How long a stage-out left to `finish_later` waits for the container's steps to end, and
# how often it asks Slurm.
FINISH_LATER_SECONDS = 900.0
FINISH_POLL_SECONDS = 5.0

USAGE = usage_text(
    "scrun delete [--force] [--regex] CONTAINER-ID",
    "Stop the container if it is still running (its job is ended, stage-out runs), then\n"
    "remove its state. Deleting an unknown container is an error unless --force is given;\n"
    "so is an anchor that cannot be stopped (frozen): its job is ended, its state kept\n"
    "for a later delete, and the line says so.\n"
    "With --regex (crun's), every container whose id the expression matches (Python's\n"
    "re.search) is deleted; none matching is no error.",
    OPTIONS,
)


def wait_gone(pid: int, start_time: int | None, timeout: float) -> bool:
    """Whether the process ends within `timeout` seconds. Its pidfd wakes us the moment it
    exits (the anchor is conmon's child, not ours: no waitpid, and polling would add up to
    its interval to every `podman stop` and `rm -f`)."""
    return pid_ends_within(pid, timeout, lambda: process_alive(pid, start_time))


def send_signal(pid: int, signum: int) -> bool:
    """Whether `pid` was there to be signalled (it may end between our check and now)."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop_anchor(ctx: CommandContext, spool: Spool, state: ContainerState) -> None:
    """SIGTERM makes the anchor end the step and job, stage out and exit. One still busy
    after `delete_timeout` (a long stage-out) is waited for as long as its hooks and step may
    take, then killed; the leftovers are then ended by `release_and_remove`. One that cannot
    act is killed at once and its job ended here: a ScrunError (see the module docstring)."""
    pid, start_time = state.anchor_pid, state.anchor_start_time
    if not send_signal(pid, SIGTERM):
        return
    bound = ctx.site.delete_timeout
    if wait_gone(pid, start_time, bound):
        return
    stuck = process_stuck(pid)
    if stuck is None:
        # its hooks, its step's SIGKILL (seconds), its srun's end and its tasks' (step_grace
        # each), its job's end
        longest = ctx.site.lua_timeout + 2 * ctx.site.step_grace + 30
        if wait_gone(pid, start_time, max(longest - bound, 0)):
            return
        log.error(f"anchor {pid} did not stop in {longest:.0f}s; killing it")
    send_signal(pid, SIGKILL)  # a stuck one dies once it is woken (thawed, its I/O done)
    if wait_gone(pid, start_time, 1 if stuck else 5):
        return
    raise end_job_of_stuck_anchor(ctx, spool, stuck or process_stuck(pid) or "?")


class StuckAnchor(ScrunError):
    """The anchor cannot act: its job was ended from here, its state stays."""


def end_job_of_stuck_anchor(ctx: CommandContext, spool: Spool, stuck: str) -> StuckAnchor:
    """The anchor cannot end the container's job: end it (its step's srun, then the job, by
    id or by its tag while it is being allocated) from here, each Slurm command bounded by
    `delete_timeout`; return the one line that says what stays."""
    state = ContainerState.load(spool)  # the anchor may have recorded the job since
    if state.step_pid and process_alive(state.step_pid, state.step_start_time):
        send_signal(state.step_pid, SIGKILL)
    from scrunlib.slurm import Slurm  # only on this fault path

    slurm = Slurm(ctx.site, ctx.slurm_conf, timeout=ctx.site.delete_timeout)
    try:
        if state.job_id is None:
            slurm.cancel_tagged(state.id)
            ended = f"cancelled the jobs tagged {state.id!r}"
        elif state.job_ended:
            ended = f"job {state.job_id} had ended"
        else:
            slurm.end_container_job(
                state.job_id, existing_job=state.existing_job, step_name=state.step_name
            )
            ended = f"ended job {state.job_id}"
    except SlurmError as exc:
        ended = f"could not end its job: {exc.message}"
    return StuckAnchor(
        f"anchor {state.anchor_pid} cannot be stopped (process state {stuck}: frozen, "
        f"stopped or waiting on I/O): Device or resource busy; {ended}; {spool.path} stays "
        f"until `scrun delete {state.id}` once the anchor has gone"
    )


def release_and_remove(ctx: CommandContext, spool: Spool, state: ContainerState) -> None:
    """Remove the spool, after what an anchor that did not finish left (it died; or it
    left stage-out pending, its tasks still running, or its job's end too after a SIGKILL
    before its step ran): our step's srun ended, the stage-out run once the tasks have
    ended (while the job still runs, as the anchor would have), our job ended. The normal
    case, nothing pending and the job ended, runs no Slurm command. A stage-out that must
    wait is left to `finish_later`, with the spool. One delete releases at a time: the
    engine may delete a container twice at once (podman's `rm` and the cleanup conmon
    starts when the anchor ends), and two stage-outs of one container would race; the
    second finds the spool gone, or what the first left."""
    if state.step_pid and process_alive(state.step_pid, state.step_start_time):
        send_signal(state.step_pid, SIGKILL)
    if not leftovers(spool, state):
        spool.remove()
        return
    lock = spool_lock(spool, "releasing", wait=True)
    if lock is None:  # the other delete removed the spool
        return
    try:
        state = ContainerState.load(spool)
        staged_out = not leftovers(spool, state) or release(ctx, spool, state)
        if staged_out:
            spool.remove()
    except ContainerNotFound:  # the other delete removed it
        return
    finally:
        os.close(lock)  # (before the finisher's fork: it would hold the lock too)
    if not staged_out:
        finish_later(ctx, spool, state)


def leftovers(spool: Spool, state: ContainerState) -> bool:
    """Whether a stage-out is pending or our job not ended."""
    job_left = state.job_id is not None and not state.job_ended
    return job_left or os.path.exists(spool.stage_file)


def spool_lock(spool: Spool, name: str, *, wait: bool) -> int | None:
    """An exclusive flock on the spool's file `name`, held until the fd is closed or its
    process ends; None when the spool has gone, or (not `wait`) another process holds it.
    The wait is bounded by the holder: a delete whose every step is bounded."""
    import fcntl  # only on the fault paths

    try:
        fd = os.open(os.path.join(spool.path, name), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def release(ctx: CommandContext, spool: Spool, state: ContainerState) -> bool:
    """Stage out (once the tasks have ended) and end our job: False when the stage-out
    must wait longer (`stage_out_left`)."""
    from scrunlib.slurm import Slurm  # only on this fault path (lint_tree/hotpath.py)

    slurm = Slurm(ctx.site, ctx.slurm_conf)
    staged_out = not os.path.exists(spool.stage_file) or stage_out_left(ctx, spool, state, slurm)
    if state.job_id is not None and not state.job_ended:
        slurm.end_container_job(
            state.job_id, existing_job=state.existing_job, step_name=state.step_name
        )
        log.verbose(f"delete: ended job {state.job_id} left by a dead anchor")
    return staged_out


def stage_out_left(ctx: CommandContext, spool: Spool, state: ContainerState, slurm: Slurm) -> bool:
    """The stage-out the anchor did not run, once the container's tasks have ended: the
    srun killed above leaves them running, so its steps are cancelled in Slurm and waited
    for until none is listed. A job Slurm is ending (someone's scancel, a time limit: the
    anchor then leaves stage-out to us) keeps its tasks until KillWait, so the wait is
    KillWait and `step_grace` seconds at most; past that (a task that ignores SIGKILL),
    stage-out, which would copy files a task may still write, is not run here: False."""
    if state.job_id is not None:
        timeout = slurm.kill_wait() + ctx.site.step_grace
        if not slurm.end_steps(state.job_id, step_names(state), timeout):
            log.error(
                f"stage-out of container {state.id} deferred: its steps in job "
                f"{state.job_id} still run {timeout:g} s after they were cancelled; it runs "
                f"once Slurm says they have ended"
            )
            return False
    run_stage_out(ctx, spool)
    return True


def step_names(state: ContainerState) -> tuple[str, ...]:
    """The names of the container's steps in its job (its own, its exec steps)."""
    from scrunlib.slurm_commands import container_step_names

    return tuple(container_step_names(state.step_name, state.existing_job))


def run_stage_out(ctx: CommandContext, spool: Spool) -> None:
    """Run the pending stage-out the spool keeps, if any (a failure is logged)."""
    from scrunlib.stageout import PendingStageOut  # only on this fault path: lupa

    pending = PendingStageOut.load(spool)
    if pending is not None:
        pending.run(ctx.site)


def finish_later(ctx: CommandContext, spool: Spool, state: ContainerState) -> None:
    """The stage-out `stage_out_left` could not run yet, run by a process of ours that
    outlives this delete (the engine goes on): in a session of its own, its stdio the null
    device (the engine reads ours until every copy of it is closed), it waits until Slurm
    lists none of the container's steps (Slurm ends a task that ignores SIGKILL at the
    node's UnkillableStepTimeout, and drains the node), FINISH_LATER_SECONDS at most, then
    runs the stage-out and removes the spool. Past that, both stay for a `scrun delete`.
    Its errors go to syslog: nobody reads its stderr, and the engine removes its --log file.
    One finisher a container: the engine may delete it twice at once (podman's `rm` and
    the cleanup conmon starts when the anchor ends), and two stage-outs would race."""
    job_id = state.job_id
    if job_id is None:  # (a stage-out is deferred only for a job's steps)
        return
    from scrunlib.stageout import PendingStageOut

    pending = PendingStageOut.load(spool)
    if pending is not None:  # (the engine removes the bundle next: the script reads it)
        pending.keep_config(spool)

    def finisher() -> int:
        from scrunlib.procio import detach_stdio

        os.setsid()
        detach_stdio()
        # the engine has had its answer and may remove its --log file: what this process
        # has to say goes to syslog, its errors at least
        log.configure(log.LogSettings(stderr=0, syslog=max(log.ERROR, log.settings().syslog)))
        if spool_lock(spool, "finishing", wait=False) is None:  # (held until we end)
            return 0  # another delete's finisher has it, or the spool has gone
        from scrunlib.slurm import Slurm

        slurm = Slurm(ctx.site, ctx.slurm_conf)
        try:
            ended = slurm.end_steps(
                job_id, step_names(state), FINISH_LATER_SECONDS,
                cancel_after=FINISH_LATER_SECONDS, poll=FINISH_POLL_SECONDS,
            )  # fmt: skip
        except SlurmError as exc:
            log.error(f"stage-out of container {state.id} not run: {exc.message}")
            return 1
        if not ended:
            log.error(
                f"stage-out of container {state.id} not run: its steps in job {job_id} "
                f"still run; `scrun delete {state.id}` runs it once they have ended"
            )
            return 1
        run_stage_out(ctx, spool)
        spool.remove()
        return 0

    fork(finisher)


def delete_container(
    ctx: CommandContext, spool: Spool, state: ContainerState, *, force: bool
) -> None:
    if state.anchor_alive():
        try:
            stop_anchor(ctx, spool, state)
        except StuckAnchor as exc:
            if not force:
                raise
            log.error(exc.message)  # its job is ended; the state stays for a later delete
            return
        try:
            state = ContainerState.load(spool)
        except ContainerNotFound:
            return  # it was still being created: the failed `create` has cleaned up
    release_and_remove(ctx, spool, state)


def delete_matching(ctx: CommandContext, pattern: str, *, force: bool) -> int:
    """Delete every container whose id `pattern` matches; each failure is reported in its
    own line and the others are still deleted. Exits with the last failure's code."""
    import re  # only for --regex (lint_tree/hotpath.py)

    from scrun_cli.list import containers

    try:
        expression = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"delete: invalid regular expression {pattern!r}: {exc}") from exc
    code = 0
    for state in containers(ctx.root):
        if expression.search(state.id) is None:
            continue
        try:
            delete_container(ctx, ctx.spool(state.id), state, force=force)
        except ScrunError as exc:
            log.error(exc.message)
            code = exc.exit_code
    return code


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="delete")
    (container_id,) = one_id(words, "delete")
    force = bool(values.get("force"))
    if values.get("regex"):
        return delete_matching(ctx, container_id, force=force)
    spool = ctx.spool(container_id)
    try:
        state = ContainerState.load(spool)
    except ContainerNotFound:
        if not force:
            raise
        spool.remove()  # a create killed before it saved the state leaves its bare directory
        return 0
    delete_container(ctx, spool, state, force=force)
    return 0
