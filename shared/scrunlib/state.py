"""Container state: an explicit state machine, persisted atomically in the spool directory.

    creating ──> created ──> running <──> paused
        │           │           │            │
        └───────────┴───────────┴────────────┴──> stopping ──> stopped

`stopping` is the anchor ending the container: its step's tasks are ended (and Slurm
confirms it), stage-out copies their files back, the job ends; only then is it `stopped`.
The OCI state document knows only creating, created, running and stopped: it shows a
stopping container as it was, running (created if it never started), with the anchor's
pid, so that a client acting on `stopped` (podman 4.3's `state`, scripts, `scrun list`)
does not act while the container's files are still being copied back.

Only the anchor writes state.json (and `create` its first version); every other command
reads it. Because it is on disk, not only in the anchor's memory, `state` and `delete` work
after the anchor has exited, and `state` reports the real exit code and job id until
`delete`. `paused` is the one status the anchor does not record: `scrun pause` freezes the
container's steps and leaves a marker file beside state.json, `scrun resume` removes it, so
no command but the anchor ever rewrites state.json.

This module is on the hot path (`scrun state`): a plain class, no dataclasses or typing,
statuses as plain strings, JSON through scrunlib.leanjson (tools/lint-tree/lint_tree/hotpath.py
says why).
"""

from __future__ import annotations

import os
import time

from scrunlib import leanjson
from scrunlib.errors import ContainerNotFound, ScrunError, StateError, reason
from scrunlib.files import write_atomically
from scrunlib.spool import PAUSED_MARKER, Spool

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Status:
    """The statuses, as state.json and the OCI state document write them."""

    CREATING = "creating"
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"  # state.json's only: see the module docstring
    STOPPED = "stopped"


TRANSITIONS: dict[str, frozenset[str]] = {
    Status.CREATING: frozenset({Status.CREATED, Status.STOPPING}),
    Status.CREATED: frozenset({Status.RUNNING, Status.STOPPING}),
    Status.RUNNING: frozenset({Status.PAUSED, Status.STOPPING}),
    Status.PAUSED: frozenset({Status.RUNNING, Status.STOPPING}),
    Status.STOPPING: frozenset({Status.STOPPED}),
    Status.STOPPED: frozenset(),
}


def now() -> str:
    """RFC 3339 UTC timestamp."""
    seconds = time.time()
    micro = int((seconds % 1) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micro:06d}Z"


def shell_exit_code(returncode: int) -> int:
    """A child's return code (subprocess/waitstatus_to_exitcode: negative N for death by
    signal N) as a shell reports it: 128+N. Upstream's 0 for a killed child hides failures."""
    return 128 - returncode if returncode < 0 else returncode


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state first), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            stat = stream.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), None if it is gone or a
    zombie. Pid plus start time identifies a process even after its pid is reused."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


# A process in these states does not act on a signal until something else wakes it: D
# (uninterruptible sleep: a hung NFS server; also a task frozen by a cgroup freezer), T and
# t (stopped, traced). Even SIGKILL waits.
STUCK_STATES = ("D", "T", "t")


def process_stuck(pid: int) -> str | None:
    """The state letter of a live process that cannot act now (STUCK_STATES), else None."""
    fields = _stat_fields(pid)
    return fields[0] if fields is not None and fields[0] in STUCK_STATES else None


def process_alive(pid: int | None, start_time: int | None) -> bool:
    if not pid:
        return False
    current = process_start_time(pid)
    return current is not None and (start_time is None or current == start_time)


# Optional fields and their defaults (a callable makes a fresh value). Order = JSON order.
_DEFAULTS: dict[str, Any] = {
    "status": Status.CREATING,
    "oci_version": "1.0.0",
    "annotations": dict,
    "owner": "",
    "created": now,
    "started": None,
    "finished": None,
    "anchor_pid": 0,
    "anchor_start_time": None,
    "job_id": None,
    "nodes": None,  # the job's NodeList, for `scrun list`
    "job_state": None,  # Slurm's JobState while it matters (PENDING: queued), else None
    "job_reason": None,  # why a PENDING job waits (Priority, Resources, Dependency, ...)
    "existing_job": False,  # joined SLURM_JOB_ID: only our step is ours to end
    "job_ended": False,  # the anchor ended the container's job/steps; delete need not call Slurm
    "step_name": "scrun",
    "step_pid": None,  # the step's srun on this host
    "step_start_time": None,
    "exit_code": None,
    "error": None,  # why Slurm ended the job, when it did
    "phases": dict,  # seconds per phase of the container's life (scrunlib.phases)
}


_IDENTITY = ("id", "bundle", "rootfs")


class ContainerState:
    """Everything scrun remembers about one container."""

    __slots__ = ("bundle", "id", "paused", "rootfs", *_DEFAULTS)
    id: str
    bundle: str
    rootfs: str
    status: str  # a Status
    oci_version: str
    annotations: dict[str, str]
    owner: str
    created: str
    started: str | None
    finished: str | None
    anchor_pid: int
    anchor_start_time: int | None
    job_id: int | None
    nodes: str | None
    job_state: str | None
    job_reason: str | None
    existing_job: bool
    job_ended: bool
    step_name: str
    step_pid: int | None
    step_start_time: int | None
    exit_code: int | None
    error: str | None
    phases: dict[str, float]
    paused: bool  # the pause marker is there (not in state.json: see the module docstring)

    def __init__(self, id: str, bundle: str, rootfs: str, **values: Any) -> None:
        unknown = set(values) - set(_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown state fields: {', '.join(sorted(unknown))}")
        self.id, self.bundle, self.rootfs = id, bundle, rootfs
        self.paused = False
        for name, default in _DEFAULTS.items():
            value = (
                values[name] if name in values else (default() if callable(default) else default)
            )
            setattr(self, name, value)
        if self.status not in TRANSITIONS:
            raise ValueError(f"unknown status {self.status!r}")

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (*_IDENTITY, *_DEFAULTS)}

    def transition(self, status: str) -> None:
        """Move forward along the state machine; anything else is a bug or a race."""
        if status not in TRANSITIONS[self.status]:
            raise StateError(f"container {self.id!r} cannot go from {self.status} to {status}")
        self.status = status
        if status == Status.RUNNING:
            self.started = now()
        elif status == Status.STOPPED:
            self.finished = now()

    def anchor_alive(self) -> bool:
        return process_alive(self.anchor_pid, self.anchor_start_time)

    def effective_status(self) -> str:
        """What the container really is: an anchor that died without recording the end
        (killed with SIGKILL, say) means the container has stopped. No anchor pid yet
        means `create` is still starting it. A running container with the pause marker is
        paused."""
        if self.status != Status.STOPPED and self.anchor_pid and not self.anchor_alive():
            return Status.STOPPED
        if self.status == Status.RUNNING and self.paused:
            return Status.PAUSED
        return self.status

    def oci_status(self) -> str:
        """The status as the OCI state document says it: a stopping container is still
        what it was (see the module docstring)."""
        status = self.effective_status()
        if status == Status.STOPPING:
            return Status.RUNNING if self.started else Status.CREATED
        return status

    def oci_state(self) -> dict[str, Any]:
        """The OCI runtime state document, plus Slurm's job id and the exit code."""
        status = self.oci_status()
        document: dict[str, Any] = {
            "ociVersion": self.oci_version,
            "id": self.id,
            "status": status,
            "pid": self.anchor_pid if status != Status.STOPPED else 0,
            "bundle": self.bundle,
            "rootfs": self.rootfs,
            "created": self.created,
            "owner": self.owner,
            "annotations": self.annotations,
        }
        if self.job_id is not None:
            document["jobId"] = self.job_id
        if self.job_state == "PENDING" and status != Status.STOPPED:
            document["jobState"] = self.job_state  # its job still waits in the queue
            if self.job_reason:
                document["jobReason"] = self.job_reason
        if status == Status.STOPPED and self.exit_code is not None:
            document["exitCode"] = self.exit_code
        return document

    def save(self, spool: Spool) -> None:
        """Write state.json atomically: a reader sees the old state or the new, never half."""
        try:
            write_atomically(spool.state_file, leanjson.dumps(self.as_dict()), durable=True)
        except OSError as exc:
            raise ScrunError(f"cannot save state in {spool.path}: {reason(exc)}") from exc

    @classmethod
    def load(cls, spool: Spool) -> ContainerState:
        return cls.load_file(spool.state_file, spool.container_id)

    @classmethod
    def load_file(cls, path: str, container_id: str) -> ContainerState:
        """The state in `path` (and the pause marker beside it); `container_id` names the
        container in errors."""
        try:
            with open(path, encoding="utf-8") as stream:
                data = leanjson.loads(stream.read())
            state = cls(**{k: v for k, v in data.items() if k in _DEFAULTS or k in _IDENTITY})
            if state.status == Status.RUNNING:
                state.paused = os.path.exists(os.path.join(os.path.dirname(path), PAUSED_MARKER))
            return state
        except FileNotFoundError:
            raise ContainerNotFound(container_id) from None
        except (OSError, ValueError, TypeError) as exc:
            raise ScrunError(f"state of container {container_id!r} is unreadable: {exc}") from exc
