"""Slurm's record of a container's job tells how the container ended: salloc holds the job
and ends it with the container's exit status. Jobs Slurm ended keep their own state."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import wait_for
from scrunlib.slurm_commands import job_tag

if TYPE_CHECKING:
    from conftest import Cluster, Podman

IMAGE = "localhost/busybox"
SCRUN = str(Path(sys.prefix) / "bin" / "scrun")


def job_record(cluster: Cluster, container_id: str) -> dict[str, str]:
    """State and exit code of the job tagged with the container id, once it has ended."""
    found: dict[str, str] = {}

    def ended() -> bool:
        for record in cluster.job_records():
            if record.get("Comment") == job_tag(container_id):
                found.update(record)
        return found.get("JobState") not in (None, "RUNNING", "COMPLETING")

    wait_for(f"the job of {container_id} ended", ended, 15, lambda: str(found))
    return found


@pytest.mark.parametrize(
    ("program", "code", "record"),
    [("exit 0", 0, ("COMPLETED", "0:0")), ("exit 3", 3, ("FAILED", "3:0"))],
)
def test_the_job_ends_with_the_containers_exit_code(
    cluster: Cluster,
    podman: Podman,
    no_leftovers: Callable[..., None],
    program: str,
    code: int,
    record: tuple[str, str],
) -> None:
    # no --rm: podman 5 removes the --cidfile with the container
    name = f"scrun-record-{uuid.uuid4().hex[:10]}"
    try:
        done = podman.scrun("run", "--name", name, IMAGE, "sh", "-c", program)
        assert done.returncode == code, done.stderr
        cid = podman.scrun("inspect", "-f", "{{.ID}}", name).stdout.strip()
        job = job_record(cluster, cid)
        assert (job["JobState"], job["ExitCode"]) == record, job
    finally:
        podman.scrun("rm", "-f", "-t", "0", name)


@pytest.fixture
def sleeping(podman: Podman, no_leftovers: Callable[..., None]) -> Iterator[str]:
    """A container sleeping in its job (its id); removed at the end."""
    started = podman.scrun("run", "-d", IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    yield cid
    podman.scrun("rm", "-f", "-t", "0", cid)


def test_a_killed_container_shows_the_signal(
    cluster: Cluster, podman: Podman, sleeping: str
) -> None:
    assert podman.scrun("kill", "-s", "KILL", sleeping).returncode == 0
    assert podman.scrun("wait", sleeping, timeout=60).stdout.strip() == "137"
    job = job_record(cluster, sleeping)
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", "0:9"), job


def test_a_job_cancelled_by_slurm_keeps_its_state(
    cluster: Cluster, podman: Podman, sleeping: str
) -> None:
    job_id = json.loads(cluster.run([SCRUN, "state", sleeping]).stdout)["jobId"]
    assert cluster.run(["scancel", str(job_id)]).returncode == 0
    podman.scrun("wait", sleeping, timeout=60)
    assert job_record(cluster, sleeping)["JobState"] == "CANCELLED"
