"""One reading of the user's jobs, shared by all of the user's queued containers.

A queued container's anchor wants its job's state and reason now and then (pending
notices, `scrun list`). Asked by each anchor for its own job, slurmctld would answer two
RPCs per queued container per poll interval (the per-job polling sites forbid users); so
the anchors of one runtime root share one reading instead: `<root>/.queue` holds when it
was taken and one `squeue --me` listing of all the user's jobs. An anchor that finds it
stale (older than the poll interval, or taken before the anchor knew its job, which it
then cannot list) refreshes it, under `<root>/.queue.lock`; the others read it. That is
one query per user per poll interval, however many containers wait.

The lock is taken without waiting: an anchor that finds another refreshing the reading
looks again a moment later (its loop must keep serving `kill` and `start`).
"""

from __future__ import annotations

import os
import time

from scrunlib.files import write_atomically
from scrunlib.slurm_commands import user_jobs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# In the runtime root, beside the other per-user dot files no container id can name.
QUEUE_READING = ".queue"
QUEUE_LOCK = ".queue.lock"


class Reading:
    """The user's jobs as one listing showed them: {job id: (state, reason)}, and the wall
    clock time the listing was asked for (every job known by then is in it)."""

    __slots__ = ("jobs", "taken")

    def __init__(self, taken: float, jobs: dict[int, tuple[str, str]]) -> None:
        self.taken, self.jobs = taken, jobs

    def serves(self, job_id: int, known_since: float, max_age: float) -> bool:
        """Whether this reading answers for the job: young enough, and either listing it
        or taken after the job was known (a job it does not list has then left Slurm)."""
        if time.time() - self.taken >= max_age:
            return False
        return job_id in self.jobs or self.taken >= known_since


def _load(path: str) -> Reading | None:
    try:
        with open(path, encoding="utf-8") as stream:
            taken, _, listing = stream.read().partition("\n")
        return Reading(float(taken), user_jobs(listing))
    except (OSError, ValueError):
        return None  # none yet, or unreadable: it is refreshed


def shared_reading(
    root: str, job_id: int, known_since: float, max_age: float, query: Callable[[], str]
) -> Reading | None:
    """The user's shared reading, serving for `job_id` (known to Slurm since
    `known_since`, wall clock), refreshed with `query` (the listing's text; it raises
    SlurmError) when it does not serve. None while another anchor is refreshing it (look
    again shortly)."""
    path = os.path.join(root, QUEUE_READING)
    reading = _load(path)
    if reading is None or not reading.serves(job_id, known_since, max_age):
        import fcntl  # built into the interpreter's library: next to nothing

        lock = os.open(os.path.join(root, QUEUE_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            reading = _load(path)  # refreshed by another while we looked
            if reading is None or not reading.serves(job_id, known_since, max_age):
                taken = time.time()
                listing = query()
                reading = Reading(taken, user_jobs(listing))
                try:  # noqa: SIM105 (contextlib is not imported on this path)
                    write_atomically(path, f"{taken}\n{listing}")
                except OSError:
                    pass  # a full or read-only root: this anchor has its answer anyway
        finally:
            os.close(lock)  # releases the lock
    return reading
