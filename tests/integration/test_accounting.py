"""The cluster keeps job records in slurmdbd (harness/accounting.sh) and enforces
associations and cgroup limits: what `sacct` tells a user about their containers, what a
user without an association sees, and that SCRUN_MEM_PER_NODE and SCRUN_CPUS_PER_TASK are
real limits inside the container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import wait_for
from users import User, assert_users_clean, errors, pick_users

if TYPE_CHECKING:
    from conftest import Cluster, Podman

IMAGE = "localhost/busybox"
SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
ACCOUNTING = Path(__file__).resolve().parents[2] / "harness" / "accounting.sh"
# sacct's record reaches slurmdbd after the job ends (slurmctld sends it on its own time)
RECORD_TIMEOUT = 30.0
# Slurm counts time limits in minutes and checks them every 30 s
TIME_LIMIT_TIMEOUT = 150.0
# a program that keeps 200 MB in its shell (pid 1): far past a 64 MB limit, and no tmpfs
# (pages charged to the job by a tmpfs outlive the processes the OOM killer can pick)
ALLOCATE = 'x=$(head -c {size} /dev/zero | tr "\\0" a); echo "kept ${{#x}} bytes"'


def sacct(cluster: Cluster, job_id: str) -> dict[str, tuple[str, str]]:
    """The job's lines in the accounting database: JobID → (State, ExitCode)."""
    done = cluster.run(
        ["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"], timeout=30
    )
    assert done.returncode == 0, done.stderr
    records = {}
    for line in done.stdout.splitlines():
        job, state, code = line.split("|")
        records[job] = (state.split()[0], code)  # "CANCELLED by 0" → CANCELLED
    return records


def final_record(cluster: Cluster, job_id: str) -> dict[str, tuple[str, str]]:
    """The job's records once the job and its steps have ended."""
    found: dict[str, tuple[str, str]] = {}

    def ended() -> bool:
        found.clear()
        found.update(sacct(cluster, job_id))
        running = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED")
        return job_id in found and all(state not in running for state, _ in found.values())

    wait_for(f"the final record of job {job_id}", ended, RECORD_TIMEOUT, lambda: str(found))
    return found


def job_of(cluster: Cluster, container_id: str) -> str:
    """The job of a container, as the accounting database knows it (by its comment)."""
    found: list[str] = []

    def recorded() -> bool:
        done = cluster.run(["sacct", "-n", "-P", "-X", "-o", "JobID,Comment"], timeout=30)
        found[:] = [
            line.split("|")[0]
            for line in done.stdout.splitlines()
            if line.endswith(f"|scrun:{container_id}")
        ]
        return bool(found)

    wait_for(f"the job of {container_id} in sacct", recorded, RECORD_TIMEOUT)
    return found[0]


def run_named(
    podman: Podman, *args: str, **kwargs: Any
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`podman run --name N ARGS` (kept: its id outlives it); returns (result, id)."""
    name = f"scrun-acct-{uuid.uuid4().hex[:10]}"
    done = podman.scrun("run", "--name", name, *args, **kwargs)
    cid = podman.scrun("inspect", "-f", "{{.ID}}", name).stdout.strip()
    podman.scrun("rm", "-f", "-t", "0", name)
    assert cid, done.stderr
    return done, cid


@pytest.mark.parametrize(
    ("program", "code", "state"),
    [("exit 0", 0, ("COMPLETED", "0:0")), ("exit 3", 3, ("FAILED", "3:0"))],
)
def test_sacct_shows_the_containers_end(
    cluster: Cluster,
    podman: Podman,
    no_leftovers: Callable[..., None],
    program: str,
    code: int,
    state: tuple[str, str],
) -> None:
    done, cid = run_named(podman, IMAGE, "sh", "-c", program)
    assert done.returncode == code, done.stderr
    job_id = job_of(cluster, cid)
    records = final_record(cluster, job_id)
    assert records[job_id] == state, records
    assert records[f"{job_id}.0"] == state, records  # the container's step


def said_why(podman: Podman, cid: str) -> list[str]:
    """The lines the container's log holds beyond its own ("up"): what scrun said of its
    end. slurmstepd's "*** STEP J.S ON NODE CANCELLED AT ... ***" is not one of them."""
    logs = podman.scrun("logs", cid)
    assert logs.returncode == 0, logs.stderr
    lines = (logs.stdout + logs.stderr).splitlines()
    assert not [line for line in lines if "***" in line], lines
    return [line for line in lines if line != "up"]


def test_sacct_shows_a_job_cancelled_by_scancel(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    started = podman.scrun("run", "-d", IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    try:
        job_id = str(json.loads(cluster.run([SCRUN, "state", cid]).stdout)["jobId"])
        assert cluster.run(["scancel", job_id]).returncode == 0
        podman.scrun("wait", cid, timeout=60)
        records = final_record(cluster, job_id)
        assert records[job_id][0] == "CANCELLED", records
        assert said_why(podman, cid) == [f"scrun: job {job_id} ended by Slurm: CANCELLED"]
    finally:
        podman.scrun("rm", "-f", "-t", "0", cid)


def test_sacct_shows_a_stopped_containers_step_cancelled(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """`podman stop` ends the container's step (SIGTERM, then SIGKILL for a pid 1 that
    ignores it, which the node's runtime sends: step_signals.kill_on_node): Slurm records
    the step and the job ended by the signal, and the container's output is its own, as
    through crun (no slurmstepd banner). The stop waits until that pid 1 runs: a SIGTERM
    that reaches the step while the node's runtime still starts ends the runtime itself
    (0:15)."""
    started = podman.scrun("run", "-d", IMAGE, "sh", "-c", "echo up; exec sleep 300")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    try:
        job_id = str(json.loads(cluster.run([SCRUN, "state", cid]).stdout)["jobId"])
        wait_for("the container's pid 1", lambda: "up" in podman.scrun("logs", cid).stdout)
        assert podman.scrun("stop", "-t", "1", cid, timeout=60).returncode == 0
        records = final_record(cluster, job_id)
        assert records[f"{job_id}.0"][0] == "FAILED", records  # not CANCELLED by Slurm
        assert records[job_id] == ("FAILED", "0:9"), records
        assert said_why(podman, cid) == []
    finally:
        podman.scrun("rm", "-f", "-t", "0", cid)


def test_sacct_names_the_containers_bundle(cluster: Cluster, podman: Podman) -> None:
    """The container's step records the bundle srun ran (sacct's `Container`, on 22.05 and
    24.11 alike), which scrun keeps under the container's id. slurmdbd stores no container
    id of its own: the id srun gets from 23.02 on (SLURM_CONTAINER_ID) is in no table and
    sacct has no field for it, so the comment (scrun:<id>) is what finds the job."""
    done, cid = run_named(podman, IMAGE, "true")
    assert done.returncode == 0, done.stderr
    job_id = job_of(cluster, cid)
    final_record(cluster, job_id)
    shown = cluster.run(["sacct", "-n", "-P", "-j", f"{job_id}.0", "-o", "JobID,Container"])
    assert shown.returncode == 0, shown.stderr
    step, bundle = shown.stdout.strip().split("|")
    assert step == f"{job_id}.0", shown.stdout
    assert Path(bundle).is_absolute() and cid in Path(bundle).parts, shown.stdout


# ----------------------------------------------------------------------------- limits


def test_memory_past_the_limit_ends_the_container_out_of_memory(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    done, cid = run_named(
        podman, "-e", "SCRUN_MEM_PER_NODE=64M", IMAGE, "sh", "-c", ALLOCATE.format(size="200m")
    )
    assert done.returncode == 137, (done.stdout, done.stderr)
    assert "kept" not in done.stdout
    job_id = job_of(cluster, cid)
    records = final_record(cluster, job_id)
    assert records[f"{job_id}.0"][0] == "OUT_OF_MEMORY", records


# The same allocation in a child of the container's shell (pid 1): the OOM killer kills the
# child, the shell goes on and exits {code}.
CHILD_ALLOCATES = "sh -c '{allocate}'; echo \"child: $?\"; exit {code}"


@pytest.mark.parametrize("code", [0, 3])
def test_a_child_killed_by_the_memory_limit_leaves_the_container_its_exit_code(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None], code: int
) -> None:
    """The container's exit code is its main process's, as with crun: Slurm reports every
    step the OOM killer struck as out of memory (srun: 1), and sacct still does."""
    program = CHILD_ALLOCATES.format(allocate=ALLOCATE.format(size="200m"), code=code)
    done, cid = run_named(podman, "-e", "SCRUN_MEM_PER_NODE=64M", IMAGE, "sh", "-c", program)
    assert (done.returncode, done.stdout) == (code, "child: 137\n"), done.stderr
    job_id = job_of(cluster, cid)
    records = final_record(cluster, job_id)
    assert records[f"{job_id}.0"][0] == "OUT_OF_MEMORY", records


@pytest.mark.parametrize(("child", "code"), [(True, 0), (False, 137)])
def test_a_users_container_past_the_memory_limit(
    cluster: Cluster, no_leftovers: Callable[..., None], child: bool, code: int
) -> None:
    """The same through a test user's rootless podman: 0 when only a child was killed,
    137 when the main process was; sacct says OUT_OF_MEMORY for both."""
    person, _ = pick_users(cluster.exports, cluster.slurm_conf)
    allocate = ALLOCATE.format(size="200m")
    program = CHILD_ALLOCATES.format(allocate=allocate, code=0) if child else allocate
    name = f"scrun-acct-{uuid.uuid4().hex[:10]}"
    try:
        done = person.podman(
            "run", "--name", name, "-e", "SCRUN_MEM_PER_NODE=64M", IMAGE, "sh", "-c", program
        )
        cid = person.podman("inspect", "-f", "{{.ID}}", name).stdout.strip()
    finally:
        person.podman("rm", "-f", "-t", "0", name)
    assert cid, done.stderr
    assert done.returncode == code, (done.stdout, done.stderr)
    assert ("child: 137" in done.stdout) == child, done.stdout
    assert "kept" not in done.stdout
    records = final_record(cluster, job_of(cluster, cid))
    assert [state for job, (state, _) in records.items() if job.endswith(".0")] == [
        "OUT_OF_MEMORY"
    ], records
    assert_users_clean(person)


def test_memory_within_the_limit_is_fine(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    """The same program, with room: the limit is what ended it above, not the program."""
    done = podman.scrun(
        "run", "--rm", "-e", "SCRUN_MEM_PER_NODE=64M", IMAGE,
        "sh", "-c", ALLOCATE.format(size="4m"),
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "kept 4194304 bytes"), done.stderr


def test_the_container_sees_the_cpus_it_asked_for(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    machine = os.cpu_count() or 1
    for asked in (1, 2):
        done = podman.scrun(
            "run", "--rm", "-e", f"SCRUN_CPUS_PER_TASK={asked}", IMAGE,
            "sh", "-c", "nproc; grep Cpus_allowed_list /proc/self/status",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        nproc, allowed = done.stdout.splitlines()
        assert int(nproc) == min(asked, machine), done.stdout
        assert allowed.split()[-1] == ("0" if asked == 1 else f"0-{min(asked, machine) - 1}")


# ----------------------------------------------------------------------------- associations


@pytest.fixture
def unassociated(cluster: Cluster) -> Iterator[User]:
    """The second test user, with their association removed for the test (put back after)."""
    _, second = pick_users(cluster.exports, cluster.slurm_conf)
    removed = cluster.run(["sacctmgr", "-i", "delete", "user", second.name], timeout=60)
    assert removed.returncode == 0, removed.stderr
    try:
        yield second
    finally:
        restored = cluster.run([str(ACCOUNTING), "associations", str(cluster.dir)], timeout=60)
        assert restored.returncode == 0, restored.stderr


def _one_line_about_the_association(stderr: str) -> None:
    lines = errors(stderr)
    assert len(lines) == 1, stderr
    assert "no association" in lines[0] and "sacctmgr" in lines[0], lines[0]


def test_a_user_without_association_gets_one_line_from_podman(
    cluster: Cluster, unassociated: User
) -> None:
    done = unassociated.podman("run", "--rm", IMAGE, "echo", "container ran")
    assert done.returncode != 0
    assert "container ran" not in done.stdout
    _one_line_about_the_association(done.stderr)
    assert_users_clean(unassociated)


def test_a_user_without_association_gets_one_line_from_scrun_run(
    cluster: Cluster, unassociated: User
) -> None:
    name = f"scrun-acct-{uuid.uuid4().hex[:10]}"
    done = unassociated.sh(f"{SCRUN} run --bundle {cluster.bundle} {name}")
    assert done.returncode != 0
    assert "hi" not in done.stdout
    _one_line_about_the_association(done.stderr)
    assert_users_clean(unassociated)


def test_sacct_shows_a_container_that_ran_out_of_time(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """SCRUN_TIMELIMIT=1: Slurm ends the job after its minute (up to 30 s later; one minute
    is Slurm's shortest limit, so this one test covers the time limit's end): sacct says
    TIMEOUT, the container stops with a non-zero exit code, and once removed nothing is
    left (no_leftovers: no job, spool dir, anchor, staged copy nor crun state on a node)."""
    started = podman.scrun("run", "-d", "-e", "SCRUN_TIMELIMIT=1", IMAGE, "sleep", "600")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    try:
        job_id = str(json.loads(cluster.run([SCRUN, "state", cid]).stdout)["jobId"])
        limit = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%l"]).stdout.strip()
        assert limit == "1:00", limit
        found: dict[str, tuple[str, str]] = {}

        def timed_out() -> bool:
            found.clear()
            found.update(sacct(cluster, job_id))
            return found.get(job_id, ("",))[0] == "TIMEOUT"

        wait_for(f"job {job_id} TIMEOUT", timed_out, TIME_LIMIT_TIMEOUT, lambda: str(found))
        waited = podman.scrun("wait", cid, timeout=60)
        assert waited.stdout.strip() not in ("", "0"), waited
        assert said_why(podman, cid) == [f"scrun: job {job_id} ended by Slurm: TIMEOUT"]
    finally:
        podman.scrun("rm", "-f", "-t", "0", cid)
