"""The anchor until its container is created: what `scrun create` (and podman) wait for.

Creation.create(): validate SCRUN_* → allocate (salloc holds the job; or join
SLURM_JOB_ID) → scrun.lua stage-in → a bundle slurmd can run (its program found in the
rootfs) → `created`, pid file written; returns Created, what scrun_anchor.container serves.
Every failure undoes what was done before reporting.

This phase imports only what it needs, which is little: os, scrun's own modules, and the
interpreter's built-in `_signal` and `_socket` (scrunlib.signals, the raw socket of
scrunlib.protocol). What serving the container needs
(scrun_anchor.container: subprocess, selectors, signal, socket: ~10 ms) is imported while
salloc waits for slurmctld, and the job's record (scontrol) is fetched once `created` is
reported, while podman prepares `start`, unless stage-in needs it first.
"""

from __future__ import annotations

import os
import time

from scrunlib import bundle as bundles
from scrunlib import job_options, jobenv, log, procio, protocol, userns
from scrunlib.errors import ScrunError, SlurmError
from scrunlib.files import write_atomically
from scrunlib.phases import PhaseClock
from scrunlib.signals import SIGINT, SIGTERM, set_handler
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Allocation, Slurm, cluster_name
from scrunlib.slurm_version import SlurmVersion, runtime_makes_terminal
from scrunlib.spool import SLURM_VERSION_CACHE, Spool, dir_name
from scrunlib.state import ContainerState, Status, process_start_time

from scrun_anchor.staging import ContainerStaging, load_stager

TYPE_CHECKING = False  # typing costs the anchor ~5 ms and 0.7 MB
if TYPE_CHECKING:
    from _socket import socket as raw_socket
    from collections.abc import Callable
    from types import FrameType

# How long salloc may take to notice that its job was cancelled before it is killed.
REAP_SECONDS = 10.0
_SIGNAL_NAMES: dict[int, str] = {SIGINT: "SIGINT", SIGTERM: "SIGTERM"}


class Cancelled(ScrunError):
    """SIGTERM or SIGINT arrived while the container was being created."""


def _raise_cancelled(signum: int, _frame: FrameType | None) -> None:
    raise Cancelled(f"creation cancelled by {_SIGNAL_NAMES.get(signum, signum)}")


def _load_serving() -> None:
    """Import what serving the container needs, while salloc waits for slurmctld."""
    import scrun_anchor.container  # noqa: F401


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


class JobEnvironment:
    """The container's job environment (scrunlib.jobenv): what scrun.lua's hooks, their
    commands and the container's srun run with. Its SLURM_* part comes from the job's
    record (`scontrol show job`), fetched once, when first asked for: before stage-in when
    there is a scrun.lua, else after `created`, off the path `scrun create` waits for."""

    def __init__(
        self,
        *,
        slurm: Slurm,
        job_id: int,
        bundle: bundles.Bundle,
        submission_bundle: str | None,
        spool: Spool,
        version: SlurmVersion,
        pid_file: str | None,
        log_file: str | None,
        log_format: str,
        record: dict[str, str] | None = None,  # already fetched (a job we joined)
    ) -> None:
        self.slurm, self.job_id, self.bundle = slurm, job_id, bundle
        self.submission_bundle, self.spool, self.version = submission_bundle, spool, version
        self.pid_file, self.log_file, self.log_format = pid_file, log_file, log_format
        self._record = record
        self._env: dict[str, str] | None = None

    def get(self) -> dict[str, str]:
        """The job env; SlurmError when the job's record cannot be had or the job is not
        running (any more)."""
        if self._env is None:
            record = self._record or self.slurm.job_record(self.job_id)
            require_running(self.job_id, record)
            self._env = jobenv.container_job_env(
                slurm_part=jobenv.slurm_variables(record, cluster_name(self.slurm.slurm_conf)),
                bundle=self.bundle,
                submission_bundle=self.submission_bundle,
                spool=self.spool,
                pid_file=self.pid_file,
                log_file=self.log_file,
                log_format=self.log_format,
                version=self.version,
            )
        return self._env


class Created:
    """What creation leaves to serving (scrun_anchor.container.Container): the container
    in state `created`, its job held, the socket listening."""

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
        job_env: JobEnvironment,
        slurm: Slurm,
        site: SiteConfig,
        server: raw_socket,
        pty_slave: int | None,
        staging: ContainerStaging | None,
        clock: PhaseClock,
    ) -> None:
        self.spool, self.state, self.job_id, self.bundle = spool, state, job_id, bundle
        self.allocation = allocation  # a job of our own, held by its salloc; None: joined
        self.run_bundle = run_bundle  # what srun --container runs (staged, adapted for slurmd)
        self.step_args = step_args  # SCRUN_* options for the step's srun
        self.job_env, self.slurm, self.site, self.server = job_env, slurm, site, server
        self.pty_slave = pty_slave  # the console socket's pty, for the step
        self.staging = staging
        self.clock = clock  # the state's phase timings


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

    def create(self) -> Created:
        """Bring the container to `created`, or undo everything and raise."""
        previous = {sig: set_handler(sig, _raise_cancelled) for sig in (SIGTERM, SIGINT)}
        undo = Undo()
        try:
            created = self._create(undo)
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
        undo.callback(close_server, server, self.spool)
        self.clock.stop("parse")
        with self.clock.phase("allocate"):
            job_id, allocation, record = self._get_job(request, undo)
        job_env = JobEnvironment(
            slurm=self.slurm,
            job_id=job_id,
            bundle=self.bundle,
            submission_bundle=self.submission_bundle,
            spool=self.spool,
            version=version,
            pid_file=self.pid_file,
            log_file=self.log_file,
            log_format=self.log_format,
            record=record,
        )
        staging = None
        with self.clock.phase("stage-in"):
            if stager is not None:
                from scrunlib.lua.records import StageContext  # only with a scrun.lua

                context = StageContext.for_container(
                    self.bundle,
                    self.spool,
                    job_id=job_id,
                    job_env=job_env.get(),
                    orig_bundle=self.submission_bundle,
                )
                staging = ContainerStaging(stager, context, self.spool, self.slurm_conf)
                undo.callback(staging.stage_out)  # also after a failed stage-in
                state.bundle, state.rootfs = staging.stage_in()
            if state.bundle != self.bundle.path and not os.path.isdir(state.bundle):
                # staged where only the nodes see it (their local disks): they run it as
                # scrun.lua made it; the program is looked up in the rootfs it copied
                log.verbose(f"staged bundle {state.bundle} is not on this host: run as staged")
                run_bundle = bundles.NodeBundle(state.bundle, bundles.node_args(self.bundle))
            else:
                run_bundle = bundles.runnable_by_slurm(
                    state.bundle,
                    bundles.node_copy_dir(state.bundle, state.id),
                    node_pty=self.bundle.terminal and not runtime_makes_terminal(version),
                    # not staged elsewhere: crun's --config file, when given, is what runs
                    config_file=self.bundle.config_file
                    if state.bundle == self.bundle.path
                    else None,
                )
        state.transition(Status.CREATED)
        state.save(self.spool)
        self._write_pid_file()
        return Created(
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
        self, request: job_options.JobRequest, undo: Undo
    ) -> tuple[int, Allocation | None, dict[str, str] | None]:
        """Allocate a job, or join SLURM_JOB_ID's; returns its id, our Allocation (None for
        a job we joined) and the joined job's record (None for ours: fetched later)."""
        state = self.state
        if request.existing_job_id is not None:
            job_id = state.job_id = request.existing_job_id
            state.existing_job = True
            state.step_name = f"scrun-{dir_name(state.id)}"
            undo.callback(end_job, self.slurm, state, job_id)
            record = self.slurm.job_record(job_id)
            from scrunlib.ownership import check_job_owner  # only for a job we join

            check_job_owner(job_id, record)
            require_running(job_id, record)
            state.nodes = record.get("NodeList")
            state.save(self.spool)
            return job_id, None, record
        state.step_name = request.job_name
        log.verbose(f"allocating: salloc {' '.join(request.allocation_args)}")
        try:
            allocation = self.slurm.allocate(
                request.job_name, state.id, request.allocation_args, while_waiting=_load_serving
            )
        except SlurmError as exc:
            variables = job_options.allocation_variables(self.environ)
            asked = [f"{name}={self.environ[name]}" for name in variables]
            if not asked:
                raise
            raise SlurmError(f"{exc.message} (job options: {', '.join(asked)})") from exc
        job_id = state.job_id = allocation.job_id
        state.nodes = allocation.nodes or None
        undo.callback(end_job, self.slurm, state, job_id, allocation)
        state.save(self.spool)
        return job_id, allocation, None

    def _write_pid_file(self) -> None:
        if not self.pid_file:
            return
        write_atomically(self.pid_file, str(os.getpid()))


def require_running(job_id: int, record: dict[str, str]) -> None:
    """SlurmError naming the job's state unless its record says RUNNING."""
    if record.get("JobState") != "RUNNING":
        raise SlurmError(f"job {job_id} is not running ({record.get('JobState')})")


def end_job(
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


def close_server(server: raw_socket, spool: Spool) -> None:
    server.close()
    try:  # noqa: SIM105 (contextlib.suppress: not imported on this path)
        os.unlink(spool.socket)
    except FileNotFoundError:
        pass
