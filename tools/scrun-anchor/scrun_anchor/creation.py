"""The anchor until its container is created: what `scrun create` (and podman) wait for.

Creation.create(): validate SCRUN_* → submit the job (salloc holds it once granted; or
join SLURM_JOB_ID) → the container's preparation (scrun_anchor.preparation: the grant,
scrun.lua's stage-in, a bundle slurmd can run) → `created`, pid file written; returns
Created, what scrun_anchor.container serves. `create` waits for the preparation only while
it is quick: a job Slurm queues, or a stage-in that runs past the site's `create_wait`,
goes on after `created` (podman gives create 240 s; a queue may take hours). Every failure
before `created` undoes what was done before reporting.

This phase imports only what it needs, which is little: os, scrun's own modules, and the
interpreter's built-in `_signal` and `_socket` (scrunlib.signals, the raw socket of
scrunlib.protocol). What serving the container needs (scrun_anchor.container: subprocess,
selectors, signal, socket; their cost: lint_tree/hotpath.py) is imported while salloc
waits for slurmctld. The job's SLURM_* variables come with salloc's answer; in a job we
join, its record (scontrol) is fetched once `created` is reported, while podman prepares
`start`, unless stage-in needs it first.
"""

from __future__ import annotations

import os
import time

from scrunlib import job_options, log, processes, procio, protocol, userns
from scrunlib.errors import ScrunError, reason
from scrunlib.files import write_atomically
from scrunlib.phases import PhaseClock
from scrunlib.pidns import own_pid
from scrunlib.signals import SIGINT, SIGTERM, set_handler
from scrunlib.slurm import Slurm
from scrunlib.spool import SLURM_VERSION_CACHE, dir_name
from scrunlib.state import Status, process_start_time

from scrun_anchor.channel import ContainerStderr
from scrun_anchor.created import Created
from scrun_anchor.life import Life, Phase
from scrun_anchor.preparation import Preparation, require_running
from scrun_anchor.staging import load_stager

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from scrunlib.launch import Launch, ReadyPipe

# How often create looks at salloc's messages for the id of a job Slurm has queued.
QUEUE_CHECK_SECONDS = 0.05

# How often create, waiting for a stage-in, looks whether scrun.lua has a notice for the user
# (which only a started container's engine shows: create then goes on without waiting).
NOTICE_CHECK_SECONDS = 0.25
_SIGNAL_NAMES: dict[int, str] = {SIGINT: "SIGINT", SIGTERM: "SIGTERM"}


class Cancelled(ScrunError):
    """SIGTERM or SIGINT arrived while the container was being created, or the `scrun
    create` waiting for it was killed."""


CREATE_GONE = "creation cancelled: the waiting `scrun create` was killed"


def _raise_cancelled(signum: int, _frame: FrameType | None) -> None:
    raise Cancelled(f"creation cancelled by {_SIGNAL_NAMES.get(signum, signum)}")


def _load_serving() -> None:
    """Import what serving the container needs, while salloc waits for slurmctld."""
    import scrun_anchor.container  # noqa: F401

    processes.preload()


class Undo:
    """What creation has set up so far, undone in reverse order when a later step fails.
    (contextlib.ExitStack's callbacks, without contextlib's imports.) An undo step that
    fails is logged; the others still run."""

    def __init__(self) -> None:
        self._steps: list[tuple[Callable[..., object], tuple[object, ...]]] = []

    def callback(self, function: Callable[..., object], *args: object) -> None:
        self._steps.append((function, args))

    def forget(self) -> None:
        """Creation succeeded: what was set up stays."""
        self._steps.clear()

    def run(self) -> None:
        while self._steps:
            function, args = self._steps.pop()
            try:
                function(*args)
            except Exception as exc:  # each undo step owns its errors; the rest must run
                log.error(f"while undoing a failed create: {exc}")


class Creation:
    """The anchor until the container is created: what `scrun create` handed over (the
    Launch: its loaded bundle, the state.json record it started, what it was asked for)
    and the pipe to report to it on."""

    def __init__(self, launch: Launch, ready: ReadyPipe) -> None:
        self.ready = ready
        self.spool, self.bundle, self.state = launch.spool, launch.bundle, launch.state
        self.pid_file = launch.pid_file
        self.console_socket = launch.console_socket
        self.site = launch.site
        self.log_file = launch.log_file
        self.log_format = launch.log.log_format
        # None when create defaulted to its cwd: scripts are told so (orig_bundle nil).
        self.submission_bundle = self.bundle.path if launch.bundle_given else None
        self.clock = PhaseClock(self.state.phases)
        self.clock.start("parse", at=launch.started)
        self.environ = job_options.merge_environment(dict(os.environ), self.bundle.env)
        self.slurm_conf = self.site.slurm_conf_path(launch.slurm_conf_option, self.environ)
        version_cache = os.path.join(self.spool.root, SLURM_VERSION_CACHE)
        self.slurm = Slurm(self.site, self.slurm_conf, version_cache=version_cache)

    def create(self) -> Created:
        """Bring the container to `created` and report it, or undo everything and raise
        (the caller reports the error). A create that has gone before it heard `created`
        is a cancel: the engine has no container to serve, end or delete."""
        previous = {sig: set_handler(sig, _raise_cancelled) for sig in (SIGTERM, SIGINT)}
        undo = Undo()
        try:
            created = self._create(undo)
            self.ready.created(own_pid())
            if self.ready.create_gone:
                raise Cancelled(CREATE_GONE)
            undo.forget()
            return created
        except BaseException as exc:
            log.error(f"create failed: {exc}")
            undo.run()  # in reverse: stage-out, end the job, close the socket
            if isinstance(exc, ScrunError):
                raise
            if isinstance(exc, Exception):
                log.error(f"unexpected failure while creating: {exc!r}")
                raise ScrunError(f"internal error while creating the container: {exc}") from exc
            raise
        finally:
            for sig, handler in previous.items():
                set_handler(sig, handler)

    def _create(self, undo: Undo) -> Created:
        """Each step that leaves something behind registers its undo right away."""
        state = self.state
        state.anchor_pid = own_pid()
        state.anchor_start_time = process_start_time(os.getpid())  # in our /proc
        state.save(self.spool)
        version = self.slurm.version()
        request = job_options.job_request(self.environ, version)
        notices = job_options.pending_notices(self.environ)
        if request.ignored_variables:
            names = ", ".join(request.ignored_variables)
            log.info(f"running in existing job {request.existing_job_id}: ignoring {names}")
        for name, alike in job_options.unknown_variables(self.environ).items():
            hint = f" (did you mean {' or '.join(alike)}?)" if alike else ""
            log.info(f"ignoring unknown variable {name}{hint}")
        stderr = ContainerStderr()  # the one channel to the user
        stager = load_stager(self.slurm, self.site, stderr)  # broken: fails before any job
        pty_slave = None
        if stager is None:
            userns.check_rootfs_visible(self.bundle.rootfs)
        if self.bundle.terminal and self.console_socket:
            pty_slave = procio.send_console(self.console_socket)
            undo.callback(os.close, pty_slave)
        server = protocol.listen(self.spool.socket)
        undo.callback(protocol.stop_listening, server, self.spool.socket)
        self.clock.stop("parse")
        life = Life(state, self.spool)
        preparation = Preparation(
            slurm=self.slurm,
            life=life,
            state=state,
            spool=self.spool,
            bundle=self.bundle,
            submission_bundle=self.submission_bundle,
            stager=stager,
            version=version,
            clock=self.clock,
            pid_file=self.pid_file,
            log_file=self.log_file,
            log_format=self.log_format,
            stderr=stderr,
        )
        undo.callback(preparation.end)
        self._get_job(request, preparation)
        self._wait(preparation, stderr)
        if preparation.error is not None:
            raise self._with_job_options(preparation)
        state.transition(Status.CREATED)
        state.save(self.spool)
        self._write_pid_file()
        return Created(
            spool=self.spool,
            life=life,
            state=state,
            bundle=self.bundle,
            preparation=preparation,
            step_args=request.step_args,
            slurm=self.slurm,
            site=self.site,
            server=server,
            pty_slave=pty_slave,
            clock=self.clock,
            notices=notices,
            stderr=stderr,
        )

    def _get_job(self, request: job_options.JobRequest, preparation: Preparation) -> None:
        """Submit our job, or join SLURM_JOB_ID's (which must be running, and the user's)."""
        state = self.state
        if request.existing_job_id is not None:
            job_id = state.job_id = request.existing_job_id
            state.existing_job = True
            state.step_name = f"scrun-{dir_name(state.id)}"
            state.save(self.spool)
            with self.clock.phase("allocate"):
                record = self.slurm.job_record(job_id)
                from scrunlib.ownership import check_job_owner  # only for a job we join

                check_job_owner(job_id, record)
                require_running(job_id, record)
            state.nodes = record.get("NodeList")
            preparation.joined(job_id, record)
            return
        state.step_name = request.job_name
        log.verbose(f"allocating: salloc {' '.join(request.allocation_args)}")
        submission = self.slurm.submit(request.job_name, state.id, request.allocation_args)
        preparation.submitted(submission)
        _load_serving()  # while salloc waits for slurmctld

    def _with_job_options(self, preparation: Preparation) -> ScrunError:
        """Preparation's error; a refused allocation's names the SCRUN_* job options asked
        for (the likeliest cause)."""
        error = preparation.error or ScrunError("preparation failed")
        asked = [
            f"{name}={self.environ[name]}"
            for name in job_options.allocation_variables(self.environ)
        ]
        if preparation.life.ended_in != Phase.QUEUED or not asked:
            return error
        return type(error)(f"{error.message} (job options: {', '.join(asked)})")

    def _wait(self, preparation: Preparation, stderr: ContainerStderr) -> None:
        """Until the container is ready or preparing it failed, but no longer than it is
        quick: a job Slurm has queued returns at once (its id known), a stage-in still
        running after the site's `create_wait` seconds, or one with a notice for the user
        (`stderr` holds it until the engine listens), goes on after `created`. Cancelled
        once the waiting create has gone (killed: nobody would end what we made)."""
        deadline = time.monotonic() + self.site.create_wait
        while preparation.life.preparing:
            if preparation.life.phase == Phase.QUEUED:
                job_id = preparation.queued_job_id()
                if job_id is not None:
                    self.state.job_id, self.state.job_state = job_id, "PENDING"
                    log.info(f"job {job_id} is queued: the container starts once it is granted")
                    return
                timeout = QUEUE_CHECK_SECONDS  # salloc says so on stderr, not on the pipe
            else:
                timeout = deadline - time.monotonic()
                if timeout <= 0 or stderr.holding:
                    log.info("stage-in goes on after create")
                    return
                timeout = min(timeout, NOTICE_CHECK_SECONDS)
            fd = preparation.watch()
            readable = self.ready.wait(fd, timeout)
            if self.ready.create_gone:
                raise Cancelled(CREATE_GONE)
            if fd is not None and not readable:
                continue
            was_queued = preparation.life.phase == Phase.QUEUED
            preparation.advance()
            if was_queued:  # the job's id, should the anchor die before `created`
                self.state.save(self.spool)

    def _write_pid_file(self) -> None:
        if not self.pid_file:
            return
        try:
            write_atomically(self.pid_file, str(own_pid()))
        except OSError as exc:
            raise ScrunError(f"cannot write --pid-file {self.pid_file}: {reason(exc)}") from exc
