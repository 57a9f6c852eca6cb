"""The queued containers of one user share one reading of their jobs: N queued anchors ask
slurmctld once per poll interval, not N times (against a fake Slurm, pytest-subprocess)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scrun_anchor.channel import ContainerStderr
from scrun_anchor.queue import QueueWatch
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm
from scrunlib.spool import Spool
from scrunlib.state import ContainerState
from scrunlib.user_queue import QUEUE_READING

QUEUED = 8  # containers of one user waiting in the queue
FIRST_JOB = 100
POLL = 30.0


@pytest.fixture
def slurm(tmp_path: Path) -> Slurm:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "scontrol"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / name).chmod(0o755)
    return Slurm(SiteConfig(bin_dir=str(bin_dir)), "/etc/x/slurm.conf")


def squeue_argv(slurm: Slurm) -> list[str]:
    return [slurm.path("squeue"), "--me", "-h", "-o", "%i %T %r"]


def listing(reasons: dict[int, str]) -> str:
    return "".join(f"{job} PENDING {reason}\n" for job, reason in reasons.items())


def queued_watches(slurm: Slurm, root: Path, bundle: Path, count: int) -> list[QueueWatch]:
    """`count` queued containers of one user (one runtime root), each its own job."""
    watches = []
    for number in range(count):
        spool = Spool(str(root), f"c{number}")
        os.makedirs(root, exist_ok=True)
        spool.create()
        state = ContainerState(id=spool.container_id, bundle=str(bundle), rootfs=str(bundle))
        state.job_id, state.job_state = FIRST_JOB + number, "PENDING"
        state.save(spool)
        watch = QueueWatch(
            slurm, state, spool, ContainerStderr(), notices=False, notice_delay=5, poll=POLL
        )
        watch.next_reading = 0  # its first reading is due
        watches.append(watch)
    return watches


def test_n_queued_anchors_of_one_user_ask_slurm_once_per_interval(
    fp, slurm, tmp_path, bundle, monkeypatch
) -> None:
    watches = queued_watches(slurm, tmp_path / "root", bundle, QUEUED)
    jobs = [FIRST_JOB + number for number in range(QUEUED)]
    fp.register(squeue_argv(slurm), stdout=listing(dict.fromkeys(jobs, "Priority")))
    for watch in watches:
        watch.check()
    assert fp.call_count(squeue_argv(slurm)) == 1
    assert fp.call_count([slurm.path("scontrol"), fp.any()]) == 0  # no per-job query
    assert {watch.state.job_reason for watch in watches} == {"Priority"}
    saved = ContainerState.load(watches[-1].spool)
    assert (saved.job_state, saved.job_reason) == ("PENDING", "Priority")  # `scrun list`'s

    # The next interval: whichever anchor comes first refreshes it, the others read it.
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + POLL + 1)
    fp.register(squeue_argv(slurm), stdout=listing(dict.fromkeys(jobs, "Resources")))
    for watch in watches:
        watch.next_reading = 0
        watch.check()
    assert fp.call_count(squeue_argv(slurm)) == 2
    assert {watch.state.job_reason for watch in watches} == {"Resources"}


def test_a_job_queued_after_the_reading_refreshes_it(fp, slurm, tmp_path, bundle) -> None:
    """A reading taken before the anchor knew its job cannot list it: it is refreshed."""
    early, late = queued_watches(slurm, tmp_path / "root", bundle, 2)
    fp.register(squeue_argv(slurm), stdout=listing({FIRST_JOB: "Priority"}))
    early.check()
    late.known_since = time.time() + 1  # its job was queued after that listing
    fp.register(
        squeue_argv(slurm), stdout=listing({FIRST_JOB: "Priority", FIRST_JOB + 1: "Resources"})
    )
    late.check()
    assert fp.call_count(squeue_argv(slurm)) == 2
    assert late.state.job_reason == "Resources"


def test_a_job_the_fresh_reading_does_not_list_is_left_as_it_was(
    fp, slurm, tmp_path, bundle
) -> None:
    """Gone from Slurm's queue since (granted, ended): salloc's answer tells the anchor."""
    (watch,) = queued_watches(slurm, tmp_path / "root", bundle, 1)
    fp.register(squeue_argv(slurm), stdout="")
    watch.check()
    assert (watch.state.job_state, watch.state.job_reason) == ("PENDING", None)
    assert watch.seconds_to_next() > POLL - 5


def test_a_failing_squeue_is_asked_again_only_next_interval(fp, slurm, tmp_path, bundle) -> None:
    (watch,) = queued_watches(slurm, tmp_path / "root", bundle, 1)
    fp.register(squeue_argv(slurm), returncode=1, stderr="squeue: error: slurmctld down\n")
    watch.check()
    assert watch.seconds_to_next() > POLL - 5
    assert not os.path.exists(tmp_path / "root" / QUEUE_READING)


# An anchor, as a process of its own (a fork of pytest's threaded process may deadlock):
# argv: the root, the job, when it was known; its query counts itself in <root>/queries.
ANCHOR = """
import sys, time
from scrunlib.user_queue import shared_reading
root, job, known_since, poll = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

def query():
    with open(root + "/queries", "a") as stream:
        stream.write("query\\n")
    time.sleep(0.5)  # long enough for every other process to find the lock taken
    return f"{job} PENDING Priority\\n"

deadline = time.monotonic() + 10
reading = None
while reading is None and time.monotonic() < deadline:
    reading = shared_reading(root, job, known_since, poll, query)
    if reading is None:
        time.sleep(0.05)  # what BUSY_RETRY_SECONDS does, shorter
sys.exit(0 if reading and reading.jobs == {job: ("PENDING", "Priority")} else 1)
"""


def test_anchors_refreshing_at_once_query_once(tmp_path) -> None:
    """Real processes at the same moment: one takes the lock and queries; the others are
    told it is being refreshed, then read what it wrote."""
    counter = tmp_path / "queries"
    known_since = time.time()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", ANCHOR, str(tmp_path), str(FIRST_JOB), str(known_since),
            str(POLL)]  # fmt: skip
    children = [subprocess.Popen(argv, env=env) for _ in range(QUEUED)]
    assert [child.wait(30) for child in children] == [0] * QUEUED
    assert counter.read_text() == "query\n"
