"""The anchor: holds one container's Slurm job from `create` to the container's end.

It lives in two phases, one class each, so that every field is valid for the object's life:

Creation.create(): validate SCRUN_* → allocate (salloc holds the job; or join
           SLURM_JOB_ID) → job environment → scrun.lua stage-in → a bundle slurmd can run
           (its program found in the rootfs) → `created`, pid file written; returns the
           Container. Every failure undoes what was done before reporting.
Container.serve(): answer `start` (launch the srun step) and `kill`; notice the step's end,
           a SIGTERM/SIGINT (what `scrun delete` sends), or the job's end; then stop().
Container.stop(): end the step (scancel, then SIGTERM → SIGKILL to a stuck srun), record
           the exit code, stage-out, end the job (salloc ends it with the container's exit
           status; only our steps in a job we joined), remove the socket, return the
           container's exit code (128+N for signal N).
Every wait is bounded but the allocation's (a pending job waits, as podman waits for
create). state.json is written at every transition: it is what the other scrun commands read.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import time
from types import FrameType

from scrunlib import bundle as bundles
from scrunlib import job_options, jobenv, log, procio, protocol, userns
from scrunlib.errors import ScrunError, SlurmError, StateError
from scrunlib.files import write_atomically
from scrunlib.ownership import check_job_owner
from scrunlib.phases import PhaseClock
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Allocation, Slurm, StepCommand, cluster_name, step_argv
from scrunlib.slurm_version import SlurmVersion, runtime_makes_terminal
from scrunlib.spool import SLURM_VERSION_CACHE, Spool, dir_name
from scrunlib.state import ContainerState, Status, process_start_time, shell_exit_code

from scrun_anchor.staging import ContainerStaging, load_stager

TYPE_CHECKING = False  # typing costs the anchor ~5 ms and 0.7 MB
if TYPE_CHECKING:
    from typing import Any

# How long salloc may take to notice that its job was cancelled before it is killed.
REAP_SECONDS = 10.0


class Cancelled(ScrunError):
    """SIGTERM or SIGINT arrived while the container was being created."""


def _raise_cancelled(signum: int, _frame: FrameType | None) -> None:
    raise Cancelled(f"creation cancelled by {signal.Signals(signum).name}")


class Creation:
    """The anchor until the container is created: what `scrun create` asked for, and the
    state.json record it started."""

    def __init__(
        self,
        *,
        spool: Spool,
        bundle_path: str,
        config_file: str | None,
        bundle_given: bool,
        pid_file: str | None,
        console_socket: str | None,
        slurm_conf_option: str | None,
        site: SiteConfig,
        log_file: str | None,
        log_format: str,
    ) -> None:
        self.spool = spool
        self.pid_file = pid_file
        self.console_socket = console_socket
        self.site = site
        self.log_file = log_file
        self.log_format = log_format
        parse_started = time.monotonic()
        self.bundle = bundles.load(bundle_path, config_file)
        # None when create defaulted to its cwd: scripts are told so (orig_bundle nil).
        self.submission_bundle = self.bundle.path if bundle_given else None
        self.state = ContainerState.load(spool)
        self.clock = PhaseClock(self.state.phases)
        self.clock.start("parse", at=parse_started)
        self.environ = job_options.merge_environment(dict(os.environ), self.bundle.env)
        self.slurm_conf = site.slurm_conf_path(slurm_conf_option, self.environ)
        version_cache = os.path.join(spool.root, SLURM_VERSION_CACHE)
        self.slurm = Slurm(site, self.slurm_conf, version_cache=version_cache)

    def create(self) -> Container:
        """Bring the container to `created`, or undo everything and raise."""
        previous = {s: signal.signal(s, _raise_cancelled) for s in (signal.SIGTERM, signal.SIGINT)}
        undo = contextlib.ExitStack()
        try:
            container = self._create(undo)
            undo.pop_all()
            return container
        except BaseException as exc:
            log.error(f"create failed: {exc}")
            undo.close()  # in reverse: stage-out, end the job, close the socket
            if isinstance(exc, ScrunError):
                raise
            if isinstance(exc, Exception):
                log.error(f"unexpected failure while creating: {exc!r}")
                raise ScrunError(f"internal error while creating the container: {exc}") from exc
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _create(self, undo: contextlib.ExitStack) -> Container:
        """Each step that leaves something behind registers its undo right away."""
        state = self.state
        state.anchor_pid = os.getpid()
        state.anchor_start_time = process_start_time(state.anchor_pid)
        state.save(self.spool)
        version = self.slurm.version()
        request = job_options.job_request(self.environ, version)
        if request.ignored_variables:
            names = ", ".join(request.ignored_variables)
            log.info(f"running in existing job {request.existing_job_id}: ignoring {names}")
        for name, alike in job_options.unknown_variables(self.environ).items():
            hint = f" (did you mean {' or '.join(alike)}?)" if alike else ""
            log.info(f"ignoring unknown variable {name}{hint}")
        stager = load_stager(self.slurm, self.site)  # broken: fails before any job exists
        pty_slave = None
        if stager is None:
            userns.check_rootfs_visible(self.bundle.rootfs)
        if self.bundle.terminal and self.console_socket:
            pty_slave = procio.send_console(self.console_socket)
            undo.callback(os.close, pty_slave)
        server = protocol.listen(self.spool.socket)
        undo.callback(_close_server, server, self.spool)
        self.clock.stop("parse")
        with self.clock.phase("allocate"):
            job_id, allocation, record = self._get_job(request, undo)
        state.nodes = record.get("NodeList")
        job_env = self._container_job_env(version, record)
        staging = None
        with self.clock.phase("stage-in"):
            if stager is not None:
                from scrunlib.lua.records import StageContext  # only with a scrun.lua

                context = StageContext.for_container(
                    self.bundle,
                    self.spool,
                    job_id=job_id,
                    job_env=job_env,
                    orig_bundle=self.submission_bundle,
                )
                staging = ContainerStaging(stager, context, self.spool, self.slurm_conf)
                undo.callback(staging.stage_out)  # also after a failed stage-in
                state.bundle, state.rootfs = staging.stage_in()
            run_bundle = bundles.runnable_by_slurm(
                state.bundle,
                self.spool.bundle_dir,
                node_pty=self.bundle.terminal and not runtime_makes_terminal(version),
                # not staged elsewhere: crun's --config file, when given, is what runs
                config_file=self.bundle.config_file if state.bundle == self.bundle.path else None,
            )
        state.transition(Status.CREATED)
        state.save(self.spool)
        self._write_pid_file()
        return Container(
            spool=self.spool,
            state=state,
            job_id=job_id,
            allocation=allocation,
            bundle=self.bundle,
            run_bundle=run_bundle,
            step_args=request.step_args,
            job_env=job_env,
            slurm=self.slurm,
            site=self.site,
            server=server,
            pty_slave=pty_slave,
            staging=staging,
            clock=self.clock,
        )

    def _get_job(
        self, request: job_options.JobRequest, undo: contextlib.ExitStack
    ) -> tuple[int, Allocation | None, dict[str, str]]:
        """Allocate a job, or join SLURM_JOB_ID's; returns its id, our Allocation (None for
        a job we joined) and its running job record."""
        state = self.state
        if request.existing_job_id is not None:
            job_id = state.job_id = request.existing_job_id
            state.existing_job = True
            state.step_name = f"scrun-{dir_name(state.id)}"
            undo.callback(_end_job, self.slurm, state, job_id)
            record = self.slurm.job_record(job_id)
            check_job_owner(job_id, record)
            if record.get("JobState") != "RUNNING":
                raise SlurmError(f"job {job_id} is not running ({record.get('JobState')})")
            state.save(self.spool)
            return job_id, None, record
        state.step_name = request.job_name
        log.verbose(f"allocating: salloc {' '.join(request.allocation_args)}")
        try:
            allocation = self.slurm.allocate(request.job_name, state.id, request.allocation_args)
        except SlurmError as exc:
            variables = job_options.allocation_variables(self.environ)
            asked = [f"{name}={self.environ[name]}" for name in variables]
            if not asked:
                raise
            raise SlurmError(f"{exc.message} (job options: {', '.join(asked)})") from exc
        job_id = state.job_id = allocation.job_id
        undo.callback(_end_job, self.slurm, state, job_id, allocation)
        state.save(self.spool)
        record = self.slurm.job_record(job_id)
        if record.get("JobState") != "RUNNING":
            raise SlurmError(f"job {job_id} ended before it started ({record.get('JobState')})")
        return job_id, allocation, record

    def _container_job_env(self, version: SlurmVersion, record: dict[str, str]) -> dict[str, str]:
        """What scrun.lua's hooks, their commands and the container's srun run with."""
        return jobenv.container_job_env(
            slurm_part=jobenv.slurm_variables(record, cluster_name(self.slurm_conf)),
            bundle=self.bundle,
            submission_bundle=self.submission_bundle,
            spool=self.spool,
            pid_file=self.pid_file,
            log_file=self.log_file,
            log_format=self.log_format,
            version=version,
        )

    def _write_pid_file(self) -> None:
        if not self.pid_file:
            return
        write_atomically(self.pid_file, str(os.getpid()))


class Container:
    """The anchor once the container is created: serves `start` and `kill` until the
    container ends, then cleans up. `step` is the srun of the container's step, None until
    `start`; `pty_slave` the terminal the step gets, None without one or once handed over.
    (A plain class: dataclasses would cost every anchor ~5 ms of imports.)"""

    def __init__(
        self,
        *,
        spool: Spool,
        state: ContainerState,
        job_id: int,
        allocation: Allocation | None,
        bundle: bundles.Bundle,
        run_bundle: bundles.NodeBundle,
        step_args: tuple[str, ...],
        job_env: dict[str, str],
        slurm: Slurm,
        site: SiteConfig,
        server: socket.socket,
        pty_slave: int | None,
        staging: ContainerStaging | None,
        clock: PhaseClock,
    ) -> None:
        self.spool, self.state, self.job_id, self.bundle = spool, state, job_id, bundle
        self.allocation = allocation  # a job of our own, held by its salloc
        self.run_bundle = run_bundle  # what srun --container runs (staged, adapted for slurmd)
        self.step_args = step_args  # SCRUN_* options for the step's srun
        self.job_env, self.slurm, self.site, self.server = job_env, slurm, site, server
        self.pty_slave = pty_slave
        self.staging = staging
        self.clock = clock  # the state's phase timings, begun by Creation
        self.step: subprocess.Popen[bytes] | None = None
        self.stop_requested: str | None = None
        self.exit_code = 0

    # ------------------------------------------------------------------ serve
    def serve(self) -> int:
        """Event loop after `created`: requests, signals, the step's end."""
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
            _detach_stdio()
        log.verbose(f"container {self.state.id} created in job {self.job_id}")
        selector = selectors.DefaultSelector()
        selector.register(self.server, selectors.EVENT_READ, "request")
        selector.register(wake_read, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in selector.select(timeout=1.0):
                if key.data == "wake":
                    _drain(wake_read)
                else:
                    self._serve_one()
            if self.stop_requested is not None:
                break
            if self.step is not None and self.step.poll() is not None:
                break
        return self.stop()

    def _on_stop_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_requested = signal.Signals(signum).name

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
        state = self.state
        if state.status == Status.RUNNING:
            return
        if state.status != Status.CREATED:
            raise StateError(f"container {state.id!r} is {state.status}, it cannot start")
        self.clock.start("launch")
        argv = step_argv(
            self.slurm.path("srun"),
            StepCommand(
                job_id=self.job_id,
                bundle=self.run_bundle.path,
                args=self.run_bundle.args,
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
            **self.job_env,
            "SLURM_CONF": self.slurm.slurm_conf,
            "PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        }
        log.verbose(f"starting step: {' '.join(argv)}")
        self.step = self.slurm.popen(argv, env, **procio.srun_stdio(self.pty_slave))
        if self.pty_slave is not None:
            os.close(self.pty_slave)
            self.pty_slave = None
        self.clock.stop("launch")
        self.clock.start("run")
        state.step_pid = self.step.pid
        state.step_start_time = process_start_time(self.step.pid)
        state.transition(Status.RUNNING)
        state.save(self.spool)

    def _kill(self, signum: int) -> None:
        state = self.state
        if state.status == Status.CREATED:
            # Never started: "killing" it ends it, as runc does with a created container.
            self.exit_code = 128 + signum
            self.stop_requested = f"signal {signum} before start"
        elif state.status == Status.RUNNING:
            self._signal_step(signum)

    def _signal_step(self, signum: int) -> None:
        """Signal our step, found by its name. Not the job: Slurm turns a job-level SIGKILL
        into a cancel that waits KillWait seconds, longer than podman waits. A new
        allocation whose step is not visible yet gets the signal at job level instead."""
        state = self.state
        steps = self.slurm.step_ids(self.job_id, state.step_name)
        for step_id in steps:
            self.slurm.cancel(self.job_id, signal=signum, step_id=step_id)
        if not steps and not state.existing_job:
            self.slurm.cancel(self.job_id, signal=signum)

    # ------------------------------------------------------------------ stop
    def stop(self) -> int:
        state = self.state
        if self.step is not None:
            self.exit_code = shell_exit_code(self._end_step(self.step))
            self.clock.stop("run")
        if self.stop_requested:
            log.info(f"stopping container {state.id}: {self.stop_requested}")
        if self.exit_code != 0:
            self._report_job_end()
        state.exit_code = self.exit_code
        state.transition(Status.STOPPED)
        state.save(self.spool)
        if self.staging is not None:
            with self.clock.phase("stage-out"):
                self.staging.stage_out()
        with self.clock.phase("teardown"):
            _end_job(self.slurm, state, self.job_id, self.allocation, self.exit_code)
        state.save(self.spool)
        _close_server(self.server, self.spool)
        log.verbose(f"container {state.id} stopped with exit code {self.exit_code}")
        log.debug(f"container {state.id} phases: {self.clock.summary()}")
        return self.exit_code

    def _end_step(self, step: subprocess.Popen[bytes]) -> int:
        """Wait for the step's srun and return its status: cancel the step first if we are
        asked to stop, and escalate SIGTERM → SIGKILL if srun does not go away in time."""
        status = step.poll()
        if status is not None:
            return status
        if self.stop_requested:  # delete, SIGTERM: end it now, as upstream does, with SIGKILL
            try:
                self._signal_step(signal.SIGKILL)
            except SlurmError as exc:
                log.error(str(exc))
        for escalation in (None, signal.SIGTERM, signal.SIGKILL):
            if escalation is not None:
                log.error(f"srun {step.pid} still running; sending {escalation.name}")
                step.send_signal(escalation)
            try:
                return step.wait(timeout=self.site.step_grace)
            except subprocess.TimeoutExpired:
                continue
        return step.wait()

    def _report_job_end(self) -> None:
        """Say why, when Slurm (not the container) ended the step: time limit, scancel."""
        state = self.state
        if state.existing_job:
            return
        deadline = time.monotonic() + 2.0
        try:
            job_state = self.slurm.job_record(self.job_id).get("JobState", "")
            # An ending job shows COMPLETING for a moment before it says how it ended.
            while job_state == "COMPLETING" and time.monotonic() < deadline:
                time.sleep(0.1)
                job_state = self.slurm.job_record(self.job_id).get("JobState", "")
        except SlurmError:
            return
        if job_state in ("TIMEOUT", "CANCELLED", "FAILED", "NODE_FAIL", "PREEMPTED", "DEADLINE"):
            state.error = f"job {self.job_id} ended by Slurm: {job_state}"
            log.error(state.error)


def _end_job(
    slurm: Slurm,
    state: ContainerState,
    job_id: int,
    allocation: Allocation | None = None,
    exit_code: int | None = None,
) -> None:
    """End what is the container's in Slurm, once: our allocation with the container's
    `exit_code` (salloc ends the job with it: COMPLETED 0:0, FAILED 3:0, FAILED 0:9), else
    by scancel (no container ran, or salloc did not end it; in a job we joined, only our
    steps); `delete` relies on job_ended."""
    if state.job_ended:
        return
    grace = slurm.site.step_grace + 30
    if allocation is not None and exit_code is not None:
        if allocation.release(exit_code, timeout=grace):
            state.job_ended = True
            return
        log.error(f"salloc of job {job_id} did not end it; cancelling it")
    try:
        slurm.end_container_job(job_id, existing_job=state.existing_job, step_name=state.step_name)
        state.job_ended = True
    except SlurmError as exc:
        log.error(str(exc))
    if allocation is not None:
        allocation.reap(timeout=REAP_SECONDS)


def _close_server(server: socket.socket, spool: Spool) -> None:
    server.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(spool.socket)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _detach_stdio() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
