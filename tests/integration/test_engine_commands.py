"""The engine commands beyond run/exec/stop that reach the runtime (docs/engine-commands.md):
`pause`/`unpause` (scrun pause/resume: the container's steps frozen on their nodes),
`top` (the anchor's pid namespace on this host, never the host's; scrun ps: the processes
on the nodes), `update` (a time limit,
nothing else), `commit` of a running container, `checkpoint` refused, `run -it` and docker's
`exec -it` (podman's is in test_exec.py), for root podman, docker and rootless podman."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import users
from helpers import (
    SCRUN_PODMAN,
    assert_lists_the_anchors_namespace,
    assert_terminal_session,
    wait_for,
)

if TYPE_CHECKING:
    from conftest import Cluster, Docker, Podman

IMAGE = "localhost/busybox"
SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
# counts in /tmp/n ten times a second for as long as it is not frozen
# /tmp/n is replaced by a rename: a reader never sees it truncated and empty
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done"


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def frozen(ps_table: str) -> bool:
    """Every process `scrun ps -o stat,args` lists is frozen (D: cgroup freezer, T: stopped)."""
    rows = ps_table.splitlines()[1:]
    return bool(rows) and all(row.split()[1][0] in "DT" for row in rows)


@pytest.fixture
def podman_container(
    podman: Podman, no_leftovers: Callable[..., None]
) -> Iterator[Callable[..., tuple[str, str]]]:
    """`start(*run_options, program=COUNTER)`: a running container (-d) through scrun;
    returns (name, id). Removed at the end (no_leftovers then checks)."""
    names: list[str] = []

    def start(*options: str, program: str = COUNTER) -> tuple[str, str]:
        name = f"scrun-engine-{uuid.uuid4().hex[:10]}"
        names.append(name)
        done = podman.scrun("run", "-d", "--name", name, *options, IMAGE,
                      "sh", "-c", program)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return name, done.stdout.strip()

    yield start
    for name in names:
        podman.scrun("rm", "-f", "-t", "0", name)


def scrun(
    cluster: Cluster, *args: str, root: Path | None = None
) -> subprocess.CompletedProcess[str]:
    options = ["--root", str(root)] if root else []
    return cluster.run([SCRUN, *options, *args])


def counter(run: Callable[..., subprocess.CompletedProcess[str]], name: str) -> int:
    """The count the container last wrote; 0 before its first write (start returns once
    the step runs, and an exec can reach the container before the shell's first `mv`)."""
    done = run("exec", name, "cat", "/tmp/n")
    if done.returncode != 0 and "can't open '/tmp/n'" in done.stderr:
        return 0
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def staged_counter(cluster: Cluster, cid: str) -> int:
    """The counter as the container's node last wrote it, read from its root filesystem as
    the cluster's scrun.lua staged it on the shared scratch (an exec would wait for a frozen
    container)."""
    staged = Path(cluster["SCRUN_SHARED_DIR"]) / str(os.getuid()) / "scrun" / cid
    # /tmp is an overlay mount over the image cache: its writes are in upper/tmp
    return int((staged / "upper" / "tmp" / "n").read_text())


def assert_pause_freezes(
    cluster: Cluster,
    engine: Callable[..., subprocess.CompletedProcess[str]],
    name: str,
    cid: str,
    root: Path | None = None,
) -> None:
    """pause: the engine says paused, scrun state says paused, every process of the
    container on its node is frozen and the counter stands still; unpause: it counts on."""
    wait_for("the counter to count", lambda: counter(engine, name) > 3, 30)
    paused = engine("pause", name)
    assert paused.returncode == 0, paused.stderr
    state = json.loads(scrun(cluster, "state", cid, root=root).stdout)
    assert state["status"] == "paused", state
    listed = scrun(cluster, "ps", cid, "-o", "stat,args", root=root)
    assert listed.returncode == 0 and frozen(listed.stdout), listed
    stood = staged_counter(cluster, cid)
    # No event says a frozen process did not count: a window of 15 counts, were it running
    time.sleep(1.5)
    assert staged_counter(cluster, cid) == stood, "the counter went on while paused"
    resumed = engine("unpause", name)
    assert resumed.returncode == 0, resumed.stderr
    before = counter(engine, name)
    assert json.loads(scrun(cluster, "state", cid, root=root).stdout)["status"] == "running"
    wait_for("the counter to count on", lambda: counter(engine, name) > before, 30)
    assert not frozen(scrun(cluster, "ps", cid, "-o", "stat,args", root=root).stdout)


# ----------------------------------------------------------------------------- podman


def test_podman_pause_unpause_and_rm_of_a_paused_container(
    cluster: Cluster, podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    name, cid = podman_container()
    assert_pause_freezes(cluster, podman.scrun, name, cid)
    assert podman.scrun("pause", name).returncode == 0
    status = podman.scrun("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
    assert status == "paused"
    refused = podman.scrun("exec", name, "true")  # podman's own check: no runtime call
    assert refused.returncode != 0
    started = time.monotonic()
    removed = podman.scrun("rm", "-f", name)  # kill 15 (thawed, acted on), delete
    assert removed.returncode == 0, removed.stderr
    assert time.monotonic() - started < 8, "rm -f of a paused container waited for SIGKILL"


def test_scrun_ps_lists_the_processes_on_every_node(
    cluster: Cluster, podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    """Two nodes, a task on each: both nodes' processes, with their names, none of this
    host (the harness's nodes share its pid space: the node column says where)."""
    _, cid = podman_container("-e", "SCRUN_JOB_NUM_NODES=2", program="exec sleep 300")
    state = json.loads(scrun(cluster, "state", cid).stdout)

    def sleeping_tasks() -> int:  # a node lists its runtime's processes before the task's
        return sum(
            row.endswith("sleep 300") for row in scrun(cluster, "ps", cid).stdout.splitlines()
        )

    wait_for("both tasks", lambda: sleeping_tasks() == 2, 30)
    listed = scrun(cluster, "ps", cid)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:3] == ["NODE", "USER", "PID"], header
    nodes = {row.split()[0] for row in rows}
    assert nodes == set(cluster.run(["scontrol", "show", "hostnames", "n[1-2]"]).stdout.split())
    assert sum(row.endswith("sleep 300") for row in rows) == 2, listed.stdout
    assert not any("scrun-anchor" in row or "scrun create" in row for row in rows)
    assert state["jobId"]
    # docker's `top` asks for pids of this host: those of the anchor's pid namespace
    as_json = scrun(cluster, "ps", "--format", "json", cid)
    assert as_json.returncode == 0, as_json.stderr
    pids = json.loads(as_json.stdout)
    assert state["pid"] in pids and 1 not in pids, pids


def test_podman_top_lists_the_anchor_with_its_salloc_and_srun(
    podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    """psgo's descriptors: the /proc of the anchor's mount namespace, its pid namespace's."""
    name, _ = podman_container(program="exec sleep 300")
    done = podman.scrun("top", name, "pid", "ppid", "args")
    assert done.returncode == 0, done.stderr
    rows = [row.split(None, 2) for row in done.stdout.splitlines()[1:]]
    assert_lists_the_anchors_namespace(rows, done.stdout)
    assert rows[0][:2] == ["1", "0"] and "scrun" in rows[0][2], done.stdout  # the anchor


def test_podman_top_with_ps_options_runs_ps_in_the_container(
    podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    """podman 4.3 runs `ps` inside the container (scrun exec, on the node) for ps(1)
    options: the container's own processes; podman >= 5 runs the host's ps in the anchor's
    pid namespace instead: the anchor with its salloc and srun, as without options."""
    name, _ = podman_container(program="exec sleep 300")
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    done = podman.scrun("top", name, "-o", "pid,ppid,args")
    assert done.returncode == 0, done.stderr
    rows = [row.split(None, 2) for row in done.stdout.splitlines()[1:]]
    if version.startswith("4."):
        assert rows == [["1", "0", "sleep 300"]], done.stdout
    else:
        assert_lists_the_anchors_namespace(rows, done.stdout)


def test_podman_run_with_a_terminal_sees_its_size_and_its_changes(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """Under podman 5 the container may start before its terminal has podman's size
    (README, Known limits); a resize always reaches it."""
    argv = [*SCRUN_PODMAN, "run", "--rm", "-it", IMAGE]
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    assert_terminal_session(argv, cluster.env, size_at_start=int(version.split(".")[0]) < 5)


def test_update_sets_a_time_limit_and_refuses_the_rest(
    cluster: Cluster, podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    name, cid = podman_container(program="exec sleep 300")
    job = str(json.loads(scrun(cluster, "state", cid).stdout)["jobId"])
    done = scrun(cluster, "update", "--time-limit", "7", cid)
    assert (done.returncode, done.stderr) == (0, "")
    limit = cluster.run(["squeue", "-h", "-j", job, "-o", "%l"]).stdout.strip()
    assert limit == "7:00", limit
    refused = podman.scrun("update", "--memory", "64m", name)
    assert refused.returncode != 0
    # podman 4.3 and 5.4 send the memory fields; 5.8 also devices and pids.limit
    refusal = re.search(r"update: (.*) cannot change for a running Slurm job; scrun update "
                        r"supports only --time-limit", refused.stderr)  # fmt: skip
    assert refusal is not None, refused.stderr
    assert {"memory.limit", "memory.swap"} <= set(refusal.group(1).split(", ")), refused.stderr
    assert cluster.run(["squeue", "-h", "-j", job, "-o", "%l"]).stdout.strip() == "7:00"


def test_commit_of_a_running_container_pauses_it_for_the_copy(
    podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    name, _ = podman_container()
    image = f"localhost/scrun-commit-{uuid.uuid4().hex[:8]}"
    try:
        done = podman.scrun("commit", "--pause=true", name, image)
        assert done.returncode == 0, done.stderr
        status = podman("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
        assert status == "running"
    finally:
        podman("rmi", "-f", image)


def test_cp_of_a_running_container_is_the_login_hosts_copy_and_exec_reaches_it(
    podman: Podman, podman_container: Callable[..., tuple[str, str]], tmp_path: Path
) -> None:
    """`podman cp` copies into and out of podman's own copy of the root filesystem on the
    login host, calling no runtime: while the container runs on its node, a file copied in
    does not reach it and what it wrote is not there to copy out (after it stopped, its
    writes are: stage-out). `podman exec -i` reaches the running container itself."""
    name, _ = podman_container(program="echo written > /tmp/out; exec sleep 600")
    wait_for("its write", lambda: podman.scrun("exec", name, "cat", "/tmp/out").stdout)
    (tmp_path / "in").write_text("copied\n")
    done = podman.scrun("cp", str(tmp_path / "in"), f"{name}:/tmp/in")
    assert done.returncode == 0, done.stderr
    assert podman.scrun("exec", name, "cat", "/tmp/in").returncode != 0
    assert podman.scrun("cp", f"{name}:/tmp/out", str(tmp_path / "out")).returncode != 0
    done = podman.scrun("exec", "-i", name, "sh", "-c", "cat > /tmp/in", input="exec\n")
    assert done.returncode == 0, done.stderr
    assert podman.scrun("exec", name, "cat", "/tmp/in").stdout == "exec\n"


def test_stats_of_the_container_are_slurms(
    cluster: Cluster, podman: Podman, podman_container: Callable[..., tuple[str, str]]
) -> None:
    """`podman stats` reads the anchor's cgroup on this host (the table says so); the
    container's usage is its step's, which sstat reports from the node."""
    _, cid = podman_container()
    job = json.loads(scrun(cluster, "state", cid).stdout)["jobId"]

    def step_usage() -> str:
        done = cluster.run(["sstat", "-n", "-P", "-j", f"{job}.0", "-o", "JobID,MaxRSS,AveCPU"])
        return done.stdout.strip() if done.returncode == 0 else ""

    usage = wait_for("the step's usage in sstat", step_usage, 60)
    assert usage.split("|")[0] == f"{job}.0", usage


def test_checkpoint_is_refused_and_the_container_runs_on(
    cluster: Cluster,
    podman: Podman,
    docker: Docker,
    podman_container: Callable[..., tuple[str, str]],
) -> None:
    name, cid = podman_container(program="exec sleep 300")
    done = podman.scrun("container", "checkpoint", name)
    assert done.returncode != 0
    assert podman("inspect", "-f", "{{.State.Status}}", name).stdout.strip() == "running"
    refused = scrun(cluster, "checkpoint", cid)
    assert refused.returncode == 1
    assert "does not support 'checkpoint'" in one_line(refused.stderr)
    assert docker("checkpoint", "create", "no-such-container", "c1").returncode != 0


# ----------------------------------------------------------------------------- docker


@pytest.fixture
def docker_container(
    docker: Docker, no_leftovers: Callable[..., None]
) -> Iterator[Callable[..., tuple[str, str]]]:
    names: list[str] = []

    def start(program: str = COUNTER) -> tuple[str, str]:
        name = f"scrun-engine-{uuid.uuid4().hex[:10]}"
        names.append(name)
        done = docker("run", "--runtime", "scrun", "--network", "none", "-d", "--name", name,
                      IMAGE, "sh", "-c", program)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return name, done.stdout.strip()

    yield start
    for name in names:
        docker("rm", "-f", name)
    wait_for("no container left in dockerd's scrun root",
             lambda: not [p for p in docker.runtime_root.glob("*") if not p.name.startswith(".")],
             30)  # fmt: skip


def test_docker_pause_commit_top_update_and_rm(
    cluster: Cluster, docker: Docker, docker_container: Callable[..., tuple[str, str]]
) -> None:
    name, cid = docker_container()
    assert_pause_freezes(cluster, docker, name, cid, root=docker.runtime_root)
    image = f"localhost/scrun-commit-{uuid.uuid4().hex[:8]}"
    committed = docker("commit", name, image)  # pause, copy, resume
    assert committed.returncode == 0, committed.stderr
    docker("rmi", image)
    assert docker("inspect", "-f", "{{.State.Status}}", name).stdout.strip() == "running"
    top = docker("top", name, "-o", "pid,ppid,args")  # ps(1) on this host, for our pids
    assert top.returncode == 0, top.stderr
    rows = [row.split(None, 2) for row in top.stdout.splitlines()[1:]]
    assert_lists_the_anchors_namespace(rows, top.stdout, pids_of_this_host=True)
    update = docker("update", "--cpus", "1", name)
    assert update.returncode != 0
    assert "cpu.period, cpu.quota cannot change for a running Slurm job" in update.stderr
    assert docker("pause", name).returncode == 0
    removed = docker("rm", "-f", name)
    assert removed.returncode == 0, removed.stderr


def test_docker_exec_with_a_terminal_sees_its_size_and_its_changes(
    docker: Docker, docker_container: Callable[..., tuple[str, str]]
) -> None:
    name, _ = docker_container(program="exec sleep 300")
    argv = ["/usr/bin/docker", "--host", docker.host, "exec", "-it", name]
    assert_terminal_session(argv, docker.env)


def test_docker_run_with_a_terminal_sees_its_size_and_its_changes(
    docker: Docker, no_leftovers: Callable[..., None]
) -> None:
    argv = ["/usr/bin/docker", "--host", docker.host, "run", "--runtime", "scrun",
            "--network", "none", "--rm", "-it", IMAGE]  # fmt: skip
    assert_terminal_session(argv, docker.env)


# ----------------------------------------------------------------------------- rootless


def test_rootless_pause_and_ps(cluster: Cluster) -> None:
    """Rootless podman 4.3 on cgroup v1 refuses `pause` itself ("this container does not
    have a cgroup") before calling the runtime: the user's `scrun pause`, what podman would
    call, freezes the user's own container on its node."""
    person = users.pick_users(cluster.exports, cluster.slurm_conf)[0]
    name = f"scrun-engine-{uuid.uuid4().hex[:10]}"
    started = person.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", COUNTER)
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    scrun_as = f"{SCRUN} --root {person.root}"
    try:
        # once crun's setup (newuidmap, setuid root) is over and the program runs
        wait_for(
            "the program on its node",
            lambda: "while :" in person.sh(f"{scrun_as} ps {cid} -o args").stdout,
            30,
        )
        paused = person.sh(f"{scrun_as} pause {cid}")
        assert (paused.returncode, paused.stderr) == (0, ""), paused.stderr
        state = json.loads(person.sh(f"{scrun_as} state {cid}").stdout)
        assert state["status"] == "paused"
        listed = person.sh(f"{scrun_as} ps {cid} -o uid,stat,args")
        assert listed.returncode == 0, listed.stderr
        rows = listed.stdout.splitlines()[1:]
        assert rows and all(row.split()[1] == str(person.uid) for row in rows), listed.stdout
        assert all(row.split()[2][0] in "DT" for row in rows), listed.stdout
        resumed = person.sh(f"{scrun_as} resume {cid}")
        assert resumed.returncode == 0, resumed.stderr
        state = json.loads(person.sh(f"{scrun_as} state {cid}").stdout)
        assert state["status"] == "running"
        # podman's top: the anchor's pid namespace, made in podman's user namespace
        top = person.podman("top", name, "pid", "ppid", "user", "args")
        assert top.returncode == 0, top.stderr
        rows = [row.split(None, 3) for row in top.stdout.splitlines()[1:]]
        assert_lists_the_anchors_namespace([[*row[:2], row[3]] for row in rows], top.stdout)
        assert {row[2] for row in rows} == {"root"}, top.stdout  # uid 0 of podman's namespace
    finally:
        person.podman("rm", "-f", "-t", "0", name)
    users.assert_users_clean(person)
