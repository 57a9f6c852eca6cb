"""A container whose job waits in Slurm's queue: what the user is told, and what `scrun
state` and `list` show.

The grant itself needs no polling (salloc's answer wakes the anchor). Only the job's state
and reason are read, from the user's shared reading of their jobs (scrunlib.user_queue: one
`squeue --me` per poll interval for all of the user's queued containers, not one query per
container): first after the site's `pending_notice` seconds (`queue_poll` when notices are
off), then every `queue_poll` seconds (at least MIN_QUEUE_POLL: the scheduler does not move
a queue faster). The container's stderr gets
`scrun: job 171 pending (Priority)` at the first reading, a line again when the reason
changes, and `scrun: job 171 running on n1` when it is granted, unless the site
(pending_notice = 0) or the container (SCRUN_PENDING_NOTICES=0) turned them off.
"""

from __future__ import annotations

import time

from scrunlib import log
from scrunlib.errors import SlurmError
from scrunlib.user_queue import shared_reading

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.slurm import Slurm
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState

    from scrun_anchor.channel import ContainerStderr


# How soon an anchor looks again at a reading another anchor is refreshing.
BUSY_RETRY_SECONDS = 1.0


class QueueWatch:
    """Reads a queued job's state now and then, records it in the container's state, and
    tells the user (`stderr`, the anchor's one channel to them) when there is something
    new."""

    def __init__(
        self,
        slurm: Slurm,
        state: ContainerState,
        spool: Spool,
        stderr: ContainerStderr,
        *,
        notices: bool,
        notice_delay: float,
        poll: float,
    ) -> None:
        self.slurm, self.state, self.spool, self.stderr = slurm, state, spool, stderr
        self.notices = notices and notice_delay > 0
        self.poll = poll
        first = notice_delay if notice_delay > 0 else poll
        self.next_reading = time.monotonic() + first
        self.told: str | None = None  # the last reason the user was told
        # wall clock time by which Slurm knew the job (it is queued before `created`): a
        # shared reading taken since then lists it, or the job has left the queue
        self.known_since = time.time()

    def seconds_to_next(self) -> float:
        return max(0.0, self.next_reading - time.monotonic())

    def check(self) -> None:
        """Read the job's state if it is time to; say what changed."""
        if time.monotonic() < self.next_reading or self.state.job_id is None:
            return
        job_id = self.state.job_id
        try:
            reading = shared_reading(
                self.spool.root, job_id, self.known_since, self.poll, self.slurm.user_jobs
            )
        except SlurmError as exc:
            log.verbose(f"cannot list the queued jobs: {exc.message}")
            self.next_reading = time.monotonic() + self.poll
            return
        if reading is None:  # another anchor is refreshing it: look again shortly
            self.next_reading = time.monotonic() + BUSY_RETRY_SECONDS
            return
        self.next_reading = time.monotonic() + self.poll
        if job_id not in reading.jobs:
            return  # it has left the queue: salloc's answer says how
        job_state, job_reason = reading.jobs[job_id]
        self.state.job_state = job_state or None
        self.state.job_reason = job_reason or None
        self.state.save(self.spool)
        if job_state != "PENDING" or not self.notices:
            return
        reason = self.state.job_reason or ""
        if self.told is None or reason != self.told:
            self.told = reason
            self.stderr.say(f"scrun: job {job_id} pending" + (f" ({reason})" if reason else ""))

    def granted(self, nodes: str) -> None:
        """The job left the queue: say so if the user was told it waits."""
        if self.told is not None:
            where = f" on {nodes}" if nodes else ""
            self.stderr.say(f"scrun: job {self.state.job_id} running{where}")
