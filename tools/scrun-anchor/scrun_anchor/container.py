"""The anchor once its container is created (scrun_anchor.creation made it so): serves
`start` and `kill` until the container ends, then cleans up.

Container.serve(): fetch the job environment (while podman prepares `start`); answer
           `start` (launch the srun step, or remember it until the preparation is ready:
           a job still queued, a stage-in still running) and `kill`; while the job waits
           in the queue, read its reason now and then and say it on the container's
           stderr; tell the Life (scrun_anchor.life, the container's one state machine)
           of the step's end, a SIGTERM/SIGINT (what `scrun delete` sends), a failed
           preparation or launch, or a step that outlived a `kill` SIGKILL
           (step_signals.StepKill: Slurm could not deliver it; its job is cancelled);
           then stop().
Container.stop(): (stopping) end the step (scancel, then SIGTERM → SIGKILL to a stuck
           srun; then its steps cancelled in Slurm until none is listed: its tasks have
           ended), record the exit code, end the preparation (a queued job withdrawn;
           stage-out once the tasks have ended: staged out; the job ended, salloc ending
           it with the container's exit status, only our steps in a job we joined: done,
           `stopped`; a SIGKILL once granted, before the step ran, leaves stage-out and
           the job's end to `scrun delete`), remove the socket, return the container's
           exit code (128+N for signal N).
Every wait is bounded but the queue's (a pending job waits for as long as Slurm keeps it;
the anchor sleeps in select() meanwhile, reading the job's reason every `queue_poll`
seconds). state.json is written at every transition: it is what the other scrun commands read.
"""

from __future__ import annotations

import os
import select
import signal
import time
from types import FrameType

from scrunlib import log, nodecheck, procio, protocol
from scrunlib.errors import ScrunError, SlurmError, StateError
from scrunlib.slurm_commands import (
    STEP_QUIET_ENV,
    StepCommand,
    container_step_names,
    step_argv,
)
from scrunlib.state import Status, process_start_time, shell_exit_code

from scrun_anchor import step_end, step_signals
from scrun_anchor.life import Event, Phase
from scrun_anchor.queue import QueueWatch

# Seconds a step whose srun has ended by itself may stay listed before it is cancelled:
# Slurm lists it until slurmstepd reports it complete, a moment later; cancelled then, its
# accounting record would say CANCELLED (and hide an OUT_OF_MEMORY).
STEP_END_PATIENCE = 2.0
# Seconds the tasks of a step that outlived the engine's SIGKILL (step_signals.StepKill)
# are waited for once its job is cancelled: a job someone else cancelled keeps them until
# KillWait (30 s by default) ends them; stage-out is left to `scrun delete`, which the
# engine runs next.
LOST_STEP_WAIT = 1.0
# Seconds between two questions to a slurmctld that did not answer at a container's end:
# 2, 4, 8, then this (each up to half again, by pid: containers that ended in an outage do
# not ask it all at once; a quick restart is seen quickly).
SLURM_RETRY_SECONDS = 10.0

# Signals that do not end a process by default: a container whose step has not started
# yet ignores them; any other ends it, as it would end its process.
HARMLESS_SIGNALS = frozenset({signal.SIGWINCH, signal.SIGCHLD, signal.SIGURG, signal.SIGCONT})

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from typing import Any

    from scrunlib.processes import Child

    from scrun_anchor.created import Created


class Container:
    """The anchor once the container is created: serves `start` and `kill` until the
    container ends, then cleans up. `step` is the srun of the container's step, None until
    it is launched; `pty_slave` the terminal the step gets, None without one or once handed
    over. (A plain class: the anchor does without dataclasses, lint_tree/hotpath.py.)"""

    def __init__(self, created: Created) -> None:
        self.spool, self.state, self.bundle = created.spool, created.state, created.bundle
        self.life = created.life  # where the container is: the one state machine
        self.preparation, self.slurm, self.site = created.preparation, created.slurm, created.site
        self.server = protocol.serving(created.server)
        self.pty_slave, self.clock = created.pty_slave, created.clock
        self.step_args = created.step_args  # SCRUN_* options for the step's srun
        self.stderr = created.stderr  # the one channel to the user
        self.queue = QueueWatch(
            self.slurm,
            self.state,
            self.spool,
            self.stderr,
            notices=created.notices,
            notice_delay=self.site.pending_notice,
            poll=self.site.queue_poll,
        )
        self.step: Child | None = None
        self.step_started = 0.0  # time.monotonic() when the step was started
        # a stop signal's name, until the loop tells the Life (not in the handler: it may
        # run while state.json is being written)
        self.stop_signal: str | None = None
        self.exit_code = 0
        # the engine's SIGKILL to the running step, until it ends; and whether the step
        # outlived it (its job was ended then, `_end_lost_step`)
        self.sigkill = step_signals.StepKill(self.slurm, self.state, self.site, self.stderr)
        self.step_lost = False
        self.signalled = False  # by the engine, once it ran: its end is no failed launch
        self.killed_unstarted = False  # SIGKILLed granted, before its step was launched

    # ------------------------------------------------------------------ serve
    def serve(self) -> int:
        """Event loop after `created`: requests, signals, the preparation's progress, the
        queued job's reason, the step's end."""
        wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_write)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the loop
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        if self.pty_slave is not None:
            # The console socket's pty is the container's stdio; ours is the caller's. (With
            # a terminal and no console socket, `scrun run` in the foreground: the caller's
            # terminal is the container's, srun --pty takes it over.)
            self.stderr.use(self.pty_slave)
            procio.detach_stdio()
        log.verbose(f"container {self.state.id} created in job {self.state.job_id}")
        if self.life.phase == Phase.READY:
            self._fetch_job_env()
        while self._goes_on():
            preparing = self.preparation.watch()
            fds = [self.server.fileno(), wake_read] + ([preparing] if preparing else [])
            readable, _, _ = select.select(fds, [], [], self._timeout())
            if wake_read in readable:
                _drain(wake_read)
            if self.server.fileno() in readable:
                self._serve_one()
            if preparing is not None and preparing in readable:
                self._advance()
            elif self.life.phase == Phase.QUEUED:
                self.queue.check()
        return self.stop()

    def _goes_on(self) -> bool:
        """Whether serving goes on: the Life told of a stop signal or of the step's end,
        false once the container's end has begun."""
        if self.stop_signal is not None:
            self.life.stop(self.stop_signal)
        if not self.life.ending and self.step is not None and self.step.poll() is not None:
            self.life.transition(Event.STEP_ENDED)
        elif not self.life.ending and self.sigkill.escalate():
            self._end_lost_step()
        return not self.life.ending

    def _timeout(self) -> float | None:
        """How long the loop may sleep: a running step is also polled each second (SIGCHLD
        wakes it anyway); a queued job until its next reading; else until something
        happens."""
        if self.step is not None:
            return self.sigkill.seconds_to_next(1.0)
        if self.life.phase == Phase.QUEUED:
            return self.queue.seconds_to_next()
        return None

    def _advance(self) -> None:
        """The preparation's next step (the job granted or ended, stage-in done), and what
        follows from it: the waiting `start` is carried out, a failure ends the container."""
        was_queued = self.life.phase == Phase.QUEUED
        self.preparation.advance()
        if was_queued and not self.life.ending:
            self.queue.granted(self.state.nodes or "")
        self.state.save(self.spool)
        if self.life.ending:  # it failed
            error = self.preparation.error or ScrunError("preparation failed")
            self._failed(error)
        elif self.life.phase == Phase.READY and self.state.status == Status.RUNNING:
            try:
                self._launch()
            except ScrunError as exc:
                self._failed(exc)
                self.life.transition(Event.FAILED, "its step could not be launched")

    def _failed(self, error: ScrunError) -> None:
        """The container cannot run: its exit code and error are `error`'s; the user is
        told."""
        self.exit_code = error.exit_code
        self.state.error = error.message
        self.stderr.say(f"scrun: error: {error.message}")

    def _fetch_job_env(self) -> None:
        """Fetch the job environment now, while podman prepares `start` (which would wait
        for it otherwise); a failure is for `start` to report."""
        job_env = self.preparation.job_env
        try:
            if job_env is not None:
                job_env.get()
        except SlurmError as exc:
            log.verbose(f"no job environment yet: {exc.message}")

    def _on_stop_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_signal = signal.Signals(signum).name

    def _serve_one(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                if not protocol.peer_allowed(conn):
                    protocol.send_line(conn, {"ok": False, "error": "permission denied"})
                    return
                message = protocol.read_line(conn)
                protocol.send_line(conn, self.handle(message))
            except (OSError, ValueError) as exc:
                log.verbose(f"bad request: {exc}")

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request of the control protocol (scrunlib.protocol) → its reply."""
        op = message.get("op")
        try:
            if op == "start":
                self._start()
            elif op == "kill":
                self._kill(int(message.get("signal", signal.SIGTERM)))
            else:
                return {"ok": False, "error": f"unknown request {op!r}"}
        except ScrunError as exc:
            log.error(exc.message)
            return {"ok": False, "error": exc.message}
        return {"ok": True}

    def _start(self) -> None:
        """Launch the step; while the preparation is under way (a queued job, a running
        stage-in) the container is `running` from now on, as for its engine it is, and the
        step is launched the moment the preparation is ready."""
        state = self.state
        self.stderr.listened()  # (podman and docker read the container's stderr from now on)
        if state.status == Status.RUNNING:
            return
        if state.status != Status.CREATED:
            raise StateError(f"container {state.id!r} is {state.status}, it cannot start")
        if self.life.phase == Phase.READY:
            self._launch()
            return
        log.verbose(f"start requested; the step starts once job {state.job_id} is ready")
        state.transition(Status.RUNNING)
        state.save(self.spool)

    def _launch(self) -> None:
        state = self.state
        run_bundle, job_env = self.preparation.run_bundle, self.preparation.job_env
        if run_bundle is None or job_env is None:
            raise StateError(f"container {state.id!r} is not ready to start")
        self.preparation.require_job()
        self.clock.start("launch")
        if self.preparation.staging is not None:
            self.preparation.staging.before_start()
        argv = step_argv(
            self.slurm.path("srun"),
            StepCommand(
                job_id=job_env.job_id,
                bundle=run_bundle.path,
                args=run_bundle.args,
                container_id=state.id,
                job_name=state.step_name,
                pty=self.bundle.terminal,
                extra_args=self.step_args,
            ),
            self.slurm.version(),
        )
        # Exactly the job env: srun reads SLURM_* input variables from its environment, so
        # nothing of the caller's may leak in (an outer allocation's SLURM_NTASKS, say).
        env = {
            **job_env.get(),
            "SLURM_CONF": self.slurm.slurm_conf,
            "PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
            **STEP_QUIET_ENV,
        }
        log.verbose(f"starting step: {' '.join(argv)}")
        if self.pty_slave is not None:
            argv = procio.when_sized(argv)
        self.step = self.slurm.start(argv, env, **procio.srun_stdio(self.pty_slave))
        self.step_started = time.monotonic()
        if self.pty_slave is not None:
            os.close(self.pty_slave)
            self.pty_slave = None
        self.clock.stop("launch")
        self.clock.start("run")
        state.step_pid = self.step.host_pid()  # `scrun delete` may kill it
        state.step_start_time = process_start_time(self.step.pid)
        state.save(self.spool)
        self.life.transition(Event.LAUNCHED)  # state.json: running

    def _kill(self, signum: int) -> None:
        state = self.state
        if self.step is None and state.status in (Status.CREATED, Status.RUNNING):
            # No step yet (never started, or its job still queued): "killing" it ends it, as
            # runc does with a created container; signals that would not end a process wait.
            if signum in HARMLESS_SIGNALS:
                return
            self.exit_code = 128 + signum
            # granted: its stage-out and job's end are left to `scrun delete` (see stop())
            self.killed_unstarted = signum == signal.SIGKILL and self.life.phase != Phase.QUEUED
            self.life.stop(f"signal {signum} before its step started")
        elif state.status == Status.RUNNING:
            self.signalled = True
            step_signals.settle(signum, self.step_started)  # until a new step's process runs
            if signum != signal.SIGKILL:
                self._signal_step(signum)
                return
            self.sigkill.request()  # sent once `kill` is answered

    def _end_lost_step(self) -> None:
        """The step outlived the engine's SIGKILL: Slurm could not deliver it (the step's
        slurmstepd is gone, say, and its srun would wait for it until the job's time
        limit). A SIGKILL is final: the job is cancelled, which ends every process of it on
        its nodes (not a job it joined, which is not ours to end), srun, which has nothing
        left to wait for, is killed, and the container ends with 128+9, as the SIGKILL
        would have ended it."""
        state = self.state
        ends = "killing its srun" if state.existing_job else f"cancelling job {self._job_id()}"
        message = (
            f"container {state.id}'s step still runs {step_signals.SIGKILL_PATIENCE:g} s after "
            f"SIGKILL: {ends}"
        )
        log.error(message)
        self.stderr.say(f"scrun: error: {message}")
        self.step_lost = True
        if not state.existing_job:
            try:
                self.slurm.cancel(self._job_id())
            except SlurmError as exc:
                log.error(exc.message)
        if self.step is not None:
            self.step.signal(signal.SIGKILL)
        self.life.stop("its step outlived SIGKILL")

    def _signal_step(self, signum: int) -> None:
        step_signals.signal_step(self.slurm, self.state, self.stderr, signum)

    # ------------------------------------------------------------------ stop
    def stop(self) -> int:
        """End the container, in this order: its step (srun, then its tasks on the nodes,
        confirmed by Slurm), stage-out, the job; only then is it `stopped` (until then
        `scrun state` says it runs, and `kill` and `start` no longer ask us). The Life goes
        through stopping, staged out and done."""
        state = self.state
        if not self.life.ending:  # called without serve(): the step's end, or none
            if self.step is not None:
                self.life.transition(Event.STEP_ENDED)
            else:
                self.life.stop("the anchor ends")
        tasks_ended = True
        if self.step is not None:
            status = self._end_step(self.step)
            tasks_ended = self._end_tasks()
            status = step_end.accounted_status(self.slurm, state, self.site, status, self.stderr)
            if self.step_lost:  # what srun says of it is not what the SIGKILL did
                status = -signal.SIGKILL
            self.exit_code = shell_exit_code(status)
            self.clock.stop("run")
        if self.life.asked_to_stop:
            log.info(f"stopping container {state.id}: {self.life.why}")
        if self.exit_code != 0 and self.step is not None and not self.step_lost:
            step_end.report_job_end(self.slurm, state, self.stderr)
            if self._failed_at_launch() and self.preparation.run_bundle is not None:
                step_end.explain_failed_launch(
                    self.slurm, state, self.preparation.run_bundle, self.stderr, self.site
                )
        state.exit_code = self.exit_code
        state.save(self.spool)  # should we die in stage-out, `state` has the exit code
        if self.killed_unstarted:  # ends now, as a process does: the engine waits 5 s
            self.preparation.leave_to_delete()
        else:
            self.preparation.end(self.exit_code, tasks_ended=tasks_ended)  # done: `stopped`
        protocol.stop_listening(self.server, self.spool.socket)
        log.verbose(f"container {state.id} stopped with exit code {self.exit_code}")
        log.debug(f"container {state.id} phases: {self.clock.summary()}")
        return self.exit_code

    def _job_id(self) -> int:
        """The container's job (known once the job was queued or granted: always when a
        step ran)."""
        return self.state.job_id or 0

    def _end_step(self, step: Child) -> int:
        """Wait for the step's srun and return its status. Asked to stop (delete, SIGTERM),
        the step first gets the engine's SIGKILL as `kill` sends it (StepKill: the node's
        runtime, then Slurm's), until srun ends or the step outlives it; srun then gets
        SIGTERM → SIGKILL if it does not go away in time."""
        status = step.poll()
        if status is not None:
            return status
        if self.life.asked_to_stop:  # end it now, as upstream does: SIGKILL
            self.sigkill.request()
            while status is None and not self.sigkill.escalate():
                status = step.wait(self.sigkill.seconds_to_next(1.0))
            if status is not None:
                return status

        def escalating(signum: int) -> None:
            log.error(f"srun {step.pid} still running; sending {signal.Signals(signum).name}")

        # srun shares our process group (it leads one only with a terminal): it alone
        return step.end(
            self.site.step_grace,
            (signal.SIGTERM, signal.SIGKILL),
            group=False,
            escalating=escalating,
        )

    def _end_tasks(self) -> bool:
        """Whether the container's tasks have ended on the nodes, as Slurm says once its
        steps are no longer listed: srun's end does not prove it (a srun killed by the
        escalation above, or lost, leaves them running). Steps still listed are cancelled
        (at once when we were asked to stop, else once they outlive STEP_END_PATIENCE) and
        waited for, `step_grace` seconds at a time. While slurmctld does not answer (a
        restart, a failover), or still lists them (their slurmstepd tells it of their end
        again only a minute after a restart it missed), it is asked again for up to the
        site's `slurmctld_wait` seconds, the user told once: stage-out left to `scrun
        delete` would run after the engine removed the container, too late for its files to
        come back. A lost SIGKILL's step is waited for LOST_STEP_WAIT seconds only (the
        engine waits 5 s, then deletes). When no answer tells, the user reads why the
        container's files did not come back."""
        state, job_id = self.state, self._job_id()
        names = container_step_names(state.step_name, state.existing_job)
        grace = LOST_STEP_WAIT if self.step_lost else self.site.step_grace
        patience = 0.0 if self.life.asked_to_stop else min(STEP_END_PATIENCE, grace / 2)
        started = time.monotonic()
        deadline = started + self.site.slurmctld_wait
        unanswered = 0
        listed_told = False
        while True:
            try:
                if self.slurm.end_steps(job_id, names, grace, cancel_after=patience):
                    return True
                if self.step_lost or time.monotonic() >= deadline:
                    waited = f"{grace:g}" if self.step_lost else f"{time.monotonic() - started:.0f}"
                    why = (
                        f"its steps in job {job_id} still run {waited} s after they were cancelled"
                    )
                    break
                if not listed_told:
                    self.stderr.say(
                        f"scrun: Slurm still lists the steps of container {state.id} after "
                        "their cancel: waiting for it to confirm that they have ended, to "
                        "copy its files back"
                    )
                    listed_told = True
            except SlurmError as exc:
                if time.monotonic() >= deadline:
                    why = f"Slurm cannot say whether its tasks have ended ({exc.message})"
                    break
                if not unanswered:
                    self.stderr.say(
                        f"scrun: Slurm does not answer ({exc.message}): waiting for it to "
                        f"confirm that container {state.id} has ended, to copy its files back"
                    )
                unanswered += 1
                pause = min(2.0**unanswered, SLURM_RETRY_SECONDS) * (1 + os.getpid() % 50 / 100)
                time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        message = (
            f"container {state.id}'s files were not copied back: {why}; "
            f"`scrun delete {state.id}` copies them once Slurm says its tasks have ended"
        )
        log.error(message)
        self.stderr.say(f"scrun: error: {message}")
        return False

    def _failed_at_launch(self) -> bool:
        """The step failed so soon after its start that it may never have launched (and
        neither Slurm, a signal from the engine nor a stop request ended it)."""
        return (
            self.step is not None
            and not self.life.asked_to_stop
            and not self.signalled
            and self.state.error is None
            and time.monotonic() - self.step_started < nodecheck.LAUNCH_WINDOW
        )


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
