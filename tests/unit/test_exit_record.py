"""scrunlib.exit_record: the container's own exit code, kept on its node when the OOM killer
hit its task (the counter found in cgroup v1 or v2, the record written only into a
directory of the user's own), and read back by the anchor (every task's, srun's rule)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from scrunlib import exit_record

V1_CGROUPS = """12:pids:/slurm_n1/uid_0/job_7/step_0/task_0
4:memory:/slurm_n1/uid_0/job_7/step_0/task_0
1:name=systemd:/
0::/
"""
V1_MOUNTS = """52 48 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
53 48 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
58 48 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_CGROUPS = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n"
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("cgroups", "mounts", "expected"),
    [
        (
            V1_CGROUPS,
            V1_MOUNTS,
            "/sys/fs/cgroup/memory/slurm_n1/uid_0/job_7/step_0/task_0/memory.oom_control",
        ),
        (
            V2_CGROUPS,
            V2_MOUNTS,
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/memory.events",
        ),
        # a hierarchy mounted from below its root (a container's view), a space escaped
        (
            "5:memory:/outer/job_7/task_0\n",
            "9 1 0:32 /outer /sys/fs/cgroup/my\\040memory rw - cgroup cgroup rw,memory\n",
            "/sys/fs/cgroup/my memory/job_7/task_0/memory.oom_control",
        ),
        ("5:memory:/elsewhere\n", "9 1 0:32 /outer /m rw - cgroup cgroup rw,memory\n", None),
        # no v1 memory controller: v2's cgroup (here the root, which counts nothing)
        (
            V1_CGROUPS.replace("4:memory", "4:cpu"),
            V1_MOUNTS,
            "/sys/fs/cgroup/unified/memory.events",
        ),
        ("", V1_MOUNTS, None),
    ],
)
def test_the_counter_of_the_tasks_memory_cgroup(
    cgroups: str, mounts: str, expected: str | None
) -> None:
    assert exit_record.oom_kill_counter(cgroups, mounts) == expected


def test_the_count_is_read_from_either_file(tmp_path: Path) -> None:
    v1, v2, old = tmp_path / "oom_control", tmp_path / "events", tmp_path / "old"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    v2.write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n")
    old.write_text("oom_kill_disable 0\nunder_oom 0\n")  # before Linux 4.13
    assert [exit_record.oom_kills(str(f)) for f in (v1, v2, old)] == [2, 1, None]
    assert exit_record.oom_kills(str(tmp_path / "gone")) is None


def test_a_watch_sees_only_kills_after_its_start(tmp_path: Path) -> None:
    counter = tmp_path / "memory.events"
    counter.write_text("oom 3\noom_kill 3\n")
    watch = exit_record.OomWatch(str(counter), exit_record.oom_kills(str(counter)))
    assert not watch.killed()
    counter.write_text("oom 4\noom_kill 4\n")
    assert watch.killed()
    assert not exit_record.OomWatch(None, None).killed()


def test_this_process_can_be_watched() -> None:
    """Where the machine has a memory cgroup hierarchy (v1 or v2), the watch finds this
    process's counter; nothing was killed meanwhile."""
    watch = exit_record.OomWatch.start()
    if watch.counter is None:
        pytest.skip("no memory cgroup hierarchy here")
    assert watch.before is not None and not watch.killed()


def config_with(env: list[str]) -> bytes:
    return json.dumps({"ociVersion": "1.0.2", "process": {"env": env}}, indent=1).encode()


def test_the_step_is_the_one_slurm_wrote_last() -> None:
    """22.05 appends the step's environment to the config's own (a user's -e comes first)."""
    env = ["SLURM_JOB_ID=1", "PATH=/bin", "SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "X=SLURM_JOB_ID="]
    assert exit_record.step_identity(config_with(env)) == (42, 0)
    assert exit_record.step_identity(config_with(["SLURM_JOB_ID=42"])) is None
    assert exit_record.step_identity(config_with(["SLURM_JOB_ID=x", "SLURM_STEP_ID=0"])) is None
    assert exit_record.record_name(42, 0, "n1.site", 1234) == "42.0.n1.site.1234"


def test_a_record_is_written_only_into_a_directory_of_our_own(tmp_path: Path) -> None:
    records = tmp_path / "scrun-exit"
    assert exit_record.write(str(records), "42.0.0", 0)
    assert (records / "42.0.0").read_text() == "0\n"
    assert records.stat().st_mode & 0o777 == 0o700
    assert exit_record.write(str(records), "42.0.0", 137)  # a second word wins
    assert (records / "42.0.0").read_text() == "137\n"

    open_to_others = tmp_path / "shared"
    open_to_others.mkdir(mode=0o777)
    open_to_others.chmod(0o777)
    assert not exit_record.write(str(open_to_others), "42.0.0", 0)
    link = tmp_path / "link"
    link.symlink_to(records)
    assert not exit_record.write(str(link), "42.0.1", 0)
    (records / "43.0.0").symlink_to(tmp_path / "elsewhere")
    assert not exit_record.write(str(records), "43.0.0", 0)
    assert not (tmp_path / "elsewhere").exists()
    assert not exit_record.write(str(tmp_path / "no" / "parent"), "42.0.0", 0)


def test_the_read_script_prints_and_removes_the_jobs_records(tmp_path: Path) -> None:
    """The script as the anchor's step runs it on a node, with $(id -u)'s directory being
    a test's (RECORD_DIR's other uses are the same format)."""
    uid = os.getuid()
    records = tmp_path / "scrun-exit"
    for name, code in (("42.0.n1.7", 0), ("42.0.n2.7", 3), ("421.0.n1.8", 9), ("7.0.n1.9", 1)):
        assert exit_record.write(str(records), name, code)
    script = exit_record.read_script(42).replace(
        exit_record.RECORD_DIR.format(uid="$(id -u)"), str(records)
    )
    assert "/run/user/$(id -u)/scrun-exit" in exit_record.read_script(42)
    assert exit_record.RECORD_DIR.format(uid=uid) == f"/run/user/{uid}/scrun-exit"
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["42.0.n1.7 0", "42.0.n2.7 3"]
    assert sorted(p.name for p in records.iterdir()) == ["421.0.n1.8", "7.0.n1.9"]
    none = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert (none.returncode, none.stdout) == (0, "")


def test_the_containers_code_is_srun_s_over_every_task() -> None:
    listing = "42.0.n1.7 0\n42.1.n1.8 5\n42.0.n2.7 3\njunk\n42.0 1\n41.0.n1.2 9\n42.0.n3.1 x\n"
    codes = exit_record.step_codes(listing, 42, 0)
    assert codes == {"n1.7": 0, "n2.7": 3}
    assert exit_record.container_code(codes, 2) == 3
    assert exit_record.container_code({"n1.7": 0}, 1) == 0
    assert exit_record.container_code({"n1.7": 137}, 1) == 137
    assert exit_record.container_code(codes, 3) is None  # a task kept nothing
    assert exit_record.container_code({}, 0) is None
