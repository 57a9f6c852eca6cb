"""Getting a container ready to start, and what that got undone at its end: its job
granted, scrun.lua's stage-in done, a bundle slurmd can run; then stage-out and the job's
end. `create` waits for the start only while it is quick; a job that waits in the queue,
or a long stage-in, goes on after `created` while the anchor serves requests.

The container's phases are scrun_anchor.life's (queued, staging, ready; stopping, staged
out, done): this module tells the Life what happened (`granted`, `staged`, `failed`,
`staged out`, `released`) and reads its phase.
queued   salloc has submitted the job; its answer pipe becomes readable when Slurm grants
         or ends it (no polling: the anchor sleeps in select()).
staging  scrun.lua's stage-in, in a worker thread (Lua and its commands block for as long
         as they take); the thread's done pipe wakes the anchor.
failed   `error` says why; the container ends with it, as a created container that never ran.

Only the anchor's main thread calls these methods and touches the container's state; the
worker thread runs stage-in alone and hands back its result.
"""

from __future__ import annotations

import os

from scrunlib import bundle as bundles
from scrunlib import jobenv, log, processes
from scrunlib.bundle import remove_node_copy
from scrunlib.errors import ScrunError, SlurmError
from scrunlib.slurm import Allocation, Slurm, Submission, cluster_name
from scrunlib.slurm_version import SlurmVersion, runtime_makes_terminal
from scrunlib.spool import Spool
from scrunlib.state import ContainerState

from scrun_anchor.life import Event, Life, Phase
from scrun_anchor.staging import ContainerStaging

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.lua.stage import Stager
    from scrunlib.phases import PhaseClock

    from scrun_anchor.channel import ContainerStderr

# How long an abandoned stage-in may take to end once its commands were killed.
ABANDON_SECONDS = 30.0

# How long salloc may take to notice that its job was cancelled before it is killed.
REAP_SECONDS = 10.0


class JobEnvironment:
    """The container's job environment (scrunlib.jobenv): what scrun.lua's hooks, their
    commands and the container's srun run with, for the job of a `preparation`. Its SLURM_*
    part, `slurm_part`, is what salloc gave the job holder, for a job of our own, or comes
    from the record of a job we joined. When the holder could not say (None), the job's
    record (`scontrol show job`) is fetched once, when first asked for: before stage-in
    when there is a scrun.lua, else after `created`, off the path `scrun create` waits for."""

    def __init__(
        self, preparation: Preparation, job_id: int, slurm_part: dict[str, str] | None
    ) -> None:
        self.preparation, self.job_id, self._slurm_part = preparation, job_id, slurm_part
        self._env: dict[str, str] | None = None

    def get(self) -> dict[str, str]:
        """The job env; SlurmError when the job's record is needed and cannot be had or
        says the job is not running (any more)."""
        if self._env is None:
            p = self.preparation
            slurm_part = self._slurm_part
            if slurm_part is None:
                record = p.slurm.job_record(self.job_id)
                require_running(self.job_id, record)
                slurm_part = p.recorded_variables(record)
            self._env = jobenv.container_job_env(
                slurm_part=slurm_part,
                bundle=p.bundle,
                submission_bundle=p.submission_bundle,
                spool=p.spool,
                pid_file=p.pid_file,
                log_file=p.log_file,
                log_format=p.log_format,
                version=p.version,
            )
        return self._env


def require_running(job_id: int, record: dict[str, str]) -> None:
    """SlurmError naming the job's state unless its record says RUNNING."""
    if record.get("JobState") != "RUNNING":
        raise SlurmError(f"job {job_id} is not running ({record.get('JobState')})")


class Preparation:
    """From a submitted (or joined) job to a container ready to start. `watch()` is the fd
    to wait on while it is neither ready nor failed; `advance()` takes the next step once
    that fd is readable. At the container's end, `end()` undoes it."""

    def __init__(
        self,
        *,
        slurm: Slurm,
        life: Life,
        state: ContainerState,
        spool: Spool,
        bundle: bundles.Bundle,
        submission_bundle: str | None,
        stager: Stager | None,
        version: SlurmVersion,
        clock: PhaseClock,
        pid_file: str | None,
        log_file: str | None,
        log_format: str,
        stderr: ContainerStderr,
    ) -> None:
        self.slurm, self.life, self.state, self.spool = slurm, life, state, spool
        self.stderr = stderr  # the one channel to the user
        self.bundle = bundle
        self.submission_bundle, self.stager, self.version = submission_bundle, stager, version
        self.clock = clock
        self.pid_file, self.log_file, self.log_format = pid_file, log_file, log_format
        self.error: ScrunError | None = None  # why it failed
        self.submission: Submission | None = None  # our job while it is queued
        self.allocation: Allocation | None = None  # our job once granted; None: joined
        self.job_env: JobEnvironment | None = None  # once the job is granted
        self.staging: ContainerStaging | None = None  # from stage-in on
        self.run_bundle: bundles.NodeBundle | None = None  # once ready
        self._worker: StageInWorker | None = None

    # ----------------------------------------------------------------- the job
    def submitted(self, submission: Submission) -> None:
        """Our own job, submitted: queued until salloc answers."""
        self.submission = submission
        self.clock.start("allocate")

    def joined(self, job_id: int, record: dict[str, str]) -> None:
        """A running job we join (SLURM_JOB_ID; `record` says it runs): nothing to wait for."""
        self._granted(job_id, self.recorded_variables(record))

    def recorded_variables(self, record: dict[str, str]) -> dict[str, str]:
        """The job's SLURM_* variables from its record (`scontrol show job`)."""
        return jobenv.slurm_variables(record, cluster_name(self.slurm.slurm_conf))

    def require_job(self) -> None:
        """SlurmError naming the job's state when salloc no longer holds our job (Slurm
        ended it: scancel, a time limit), before a step is launched in it."""
        allocation = self.allocation
        if allocation is not None and not allocation.held():
            require_running(allocation.job_id, self.slurm.job_record(allocation.job_id))

    def queued_job_id(self) -> int | None:
        """Our job's id while it waits in the queue (salloc said so), else None."""
        return self.submission.queued_job_id() if self.submission is not None else None

    # ----------------------------------------------------------------- progress
    def watch(self) -> int | None:
        """The fd whose readability means `advance()` has something to do; None when ready
        or failed."""
        if self.life.phase == Phase.QUEUED and self.submission is not None:
            return self.submission.fileno()
        if self.life.phase == Phase.STAGING and self._worker is not None:
            return self._worker.done_fd
        return None

    def advance(self) -> None:
        """The next step, now that watch()'s fd is readable: the job's grant (or its end),
        or stage-in's result. Failures are recorded, not raised."""
        try:
            if self.life.phase == Phase.QUEUED and self.submission is not None:
                submission, self.submission = self.submission, None
                try:
                    allocation = submission.granted()
                finally:
                    self.clock.stop("allocate")
                self.allocation = allocation
                self.state.nodes = allocation.nodes or None
                self._granted(allocation.job_id, allocation.variables)
            elif self.life.phase == Phase.STAGING and self._worker is not None:
                worker, self._worker = self._worker, None
                worker.join()
                self.clock.stop("stage-in")
                if worker.error is not None:
                    raise worker.error
                self.state.bundle, self.state.rootfs = worker.result
                self._ready()
        except ScrunError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug: the container fails with it, the anchor goes on
            log.error(f"unexpected failure while preparing: {exc!r}")
            self._fail(ScrunError(f"internal error while preparing the container: {exc}"))

    def _granted(self, job_id: int, slurm_part: dict[str, str] | None) -> None:
        self.state.job_id = job_id
        self.state.job_state, self.state.job_reason = "RUNNING", None
        self.job_env = JobEnvironment(self, job_id, slurm_part)
        self.life.transition(Event.GRANTED)
        if self.stager is None:
            self._ready()
            return
        from scrunlib.lua.records import StageContext  # only with a scrun.lua

        self.clock.start("stage-in")
        context = StageContext.for_container(
            self.bundle,
            self.spool,
            job_id=job_id,
            job_env=self.job_env.get(),
            orig_bundle=self.submission_bundle,
        )
        self.staging = ContainerStaging(
            self.stager, context, self.spool, self.slurm.slurm_conf, self.stderr
        )
        self._worker = StageInWorker(self.staging)

    def _ready(self) -> None:
        state = self.state
        if state.bundle != self.bundle.path and not os.path.isdir(state.bundle):
            # staged where only the nodes see it (their local disks): they run it as
            # scrun.lua made it; the program is looked up in the rootfs it copied
            log.verbose(f"staged bundle {state.bundle} is not on this host: run as staged")
            self.run_bundle = bundles.NodeBundle(state.bundle, bundles.node_args(self.bundle))
        else:
            self.run_bundle = bundles.runnable_by_slurm(
                state.bundle,
                bundles.node_copy_dir(state.bundle, state.id),
                node_pty=self.bundle.terminal and not runtime_makes_terminal(self.version),
                # not staged elsewhere: crun's --config file, when given, is what runs
                config_file=self.bundle.config_file if state.bundle == self.bundle.path else None,
            )
        self.life.transition(Event.STAGED)

    def _fail(self, error: ScrunError) -> None:
        log.error(error.message)
        self.error = error
        self.life.transition(Event.FAILED, "its preparation failed")

    # ----------------------------------------------------------------- the end
    def abandon(self) -> None:
        """Stop what is in flight, leaving no job that was not granted: a queued job is
        withdrawn; a running stage-in has its commands killed and is waited for (bounded),
        so that stage-out can run after it. What was granted and staged stays for the
        caller's teardown (`allocation`, `staging`)."""
        if self.submission is not None:
            submission, self.submission = self.submission, None
            try:
                submission.withdraw()
            except SlurmError as exc:  # salloc is gone; a tagged job may remain for delete
                log.error(exc.message)
            self.clock.stop("allocate")
        if self._worker is not None:
            worker, self._worker = self._worker, None
            processes.cancel_running()
            try:
                if not worker.join(ABANDON_SECONDS):
                    log.error("stage-in did not end after its commands were killed")
                    self.staging = None  # its Lua state is busy: stage-out cannot run
            finally:
                processes.allow_again()
        if self.life.preparing:
            self._fail(ScrunError("the container was removed before it was ready"))

    def end(self, exit_code: int | None = None, *, tasks_ended: bool = True) -> None:
        """Everything the preparation holds, undone in reverse: what is in flight stopped
        (a queued job withdrawn), the bundle copy for slurmd removed, stage-out run (also
        after a failed stage-in, so that the script can remove what it staged), the job
        ended with `exit_code` (None: cancelled). Stage-out never copies files a task may
        still write: unless `tasks_ended`, it stays pending (stage.json), for `scrun
        delete` to run once Slurm has ended the tasks with the job. A container whose end
        has not begun (creation failed) fails here."""
        self.abandon()
        if not self.life.ending:
            self.life.transition(Event.FAILED, "its creation failed")
        state = self.state
        if self.run_bundle is not None:
            remove_node_copy(self.run_bundle, state.bundle)
        if self.staging is not None and not tasks_ended:  # (the caller said why)
            self.staging.leave_pending()
        elif self.staging is not None:
            with self.clock.phase("stage-out"):
                self.staging.stage_out()
        self.life.transition(Event.STAGED_OUT)
        if self.allocation is None and not state.existing_job:
            state.job_ended = True  # never granted: withdrawn with its submission
        elif state.job_id is not None and not state.job_ended:
            with self.clock.phase("teardown"):
                self._end_job(state.job_id, exit_code)
        self.life.transition(Event.RELEASED)

    def leave_to_delete(self) -> None:
        """The container was SIGKILLed once granted, before its step ran: it ends at once,
        as a process ends of SIGKILL. The engine waits 5 s for the anchor's exit (past them
        podman's `rm -f` fails: "given PIDs did not die within timeout"), and a stage-out
        and a job's end can take longer on a login node busy removing hundreds. What is in
        flight stops (stage-in's commands are killed); the stage-out (no task ran: it only
        removes what stage-in staged) and the job's end are left to `scrun delete`, which
        the engine runs next, as after an anchor that died (the spool says both are
        pending: stage.json, job_ended false). The Life stays at `staged out`."""
        staging = self.staging  # (abandon forgets a stage-in that would not end)
        self.abandon()
        if self.run_bundle is not None:
            remove_node_copy(self.run_bundle, self.state.bundle)
        if staging is not None:
            staging.leave_pending()
        self.life.transition(Event.STAGED_OUT)

    def _end_job(self, job_id: int, exit_code: int | None) -> None:
        """End what is the container's in Slurm: our allocation with the container's
        `exit_code` (salloc ends the job with it: COMPLETED 0:0, FAILED 3:0, FAILED 0:9),
        else by scancel (no container ran, or salloc did not end it; in a job we joined,
        only our steps); `delete` relies on job_ended."""
        state, allocation = self.state, self.allocation
        if allocation is not None and exit_code is not None:
            if allocation.release(exit_code, timeout=self.slurm.site.step_grace + 30):
                state.job_ended = True
                return
            log.error(f"salloc of job {job_id} did not end it; cancelling it")
        try:
            self.slurm.end_container_job(
                job_id, existing_job=state.existing_job, step_name=state.step_name
            )
            state.job_ended = True
        except SlurmError as exc:
            log.error(str(exc))
        if allocation is not None:
            allocation.reap(timeout=REAP_SECONDS)


class StageInWorker:
    """scrun.lua's stage-in in a thread of its own; `done_fd` becomes readable when it has
    ended, `result` or `error` holds how."""

    def __init__(self, staging: ContainerStaging) -> None:
        self.staging = staging
        self.result: tuple[str, str] = ("", "")
        self.error: ScrunError | None = None
        import threading  # only with a scrun.lua (stage-in loaded its commands' subprocess)

        self.done_fd, self._done_write = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="stage-in", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self.staging.stage_in()
        except ScrunError as exc:
            self.error = exc
        except Exception as exc:  # reported by the main thread, as any failure of stage-in
            self.error = ScrunError(f"stage-in failed: {exc!r}")
        finally:
            os.write(self._done_write, b"x")

    def join(self, timeout: float | None = None) -> bool:
        """Whether the thread has ended (waiting up to `timeout` seconds); its pipe is closed
        once it has."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        for fd in (self.done_fd, self._done_write):
            os.close(fd)
        self.done_fd = self._done_write = -1
        return True
