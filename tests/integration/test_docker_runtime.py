"""docker with `--runtime scrun`, end to end: a private dockerd (the `docker` fixture,
harness/docker-up.sh) runs every container as a real Slurm job on the local cluster.

docker talks to the runtime through containerd's shim and passes `--root
<exec-root>/runtime-runc/moby`, so scrun keeps its state for docker there, not in podman's
default root: every test checks both for leftovers (`no_leftovers`, `docker_leftovers`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import wait_for, wait_for_clean
from scrunlib.slurm_commands import job_tag, tagged_container

if TYPE_CHECKING:
    from conftest import Cluster, Docker

IMAGE = "localhost/busybox"
LABEL = "scrun-test=docker-runtime"  # on every container made here: found again by it
KILL_WITHIN = 3.0  # seconds from SIGKILL to the container's end


def scrun_docker(docker: Docker, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`docker run --runtime scrun --network none --label LABEL ARGS`."""
    return docker(
        "run", "--runtime", "scrun", "--network", "none", "--label", LABEL, *args, **kwargs
    )


def scrun_jobs(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """squeue's jobs of scrun's: container id (from the job tag comment) → (job, state)."""
    done = cluster.run(["squeue", "-h", "-o", "%i %T %k"], timeout=30)
    assert done.returncode == 0, done.stderr
    jobs = {}
    for line in done.stdout.splitlines():
        job_id, state, comment = [*line.split(maxsplit=2), "", ""][:3]
        container_id = tagged_container(comment.strip())
        if container_id is not None:
            jobs[container_id] = (job_id, state)
    return jobs


def docker_leftover_list(docker: Docker) -> list[str]:
    problems = []
    # scrun's per-container directories under docker's --root (the dot files are caches)
    root = docker.runtime_root
    if root.is_dir():
        problems += [f"scrun state dir left: {d}" for d in sorted(root.iterdir()) if d.is_dir()]
    listed = docker("ps", "-a", "-q", "--no-trunc", "--filter", f"label={LABEL}", timeout=30)
    if listed.returncode != 0:
        problems.append(f"docker ps failed: {listed.stderr.strip()}")
    problems += [f"docker container left: {cid}" for cid in listed.stdout.split()]
    return problems


@pytest.fixture
def docker_leftovers(docker: Docker) -> Iterator[Callable[..., None]]:
    """After the test: no container directory in scrun's root under dockerd, no container of
    this module in docker. Polls like `no_leftovers` (dockerd cleans up after the CLI)."""

    def check(timeout: float = 10.0) -> None:
        wait_for_clean(lambda: docker_leftover_list(docker), timeout)

    yield check
    check()


@pytest.fixture
def container_name(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> Iterator[str]:
    """A unique name; the container is force-removed afterwards if a test left it. (Set up
    after the leftover checks, so torn down before them: a failed test's container does not
    also fail them.)"""
    name = f"scrun-docker-test-{uuid.uuid4().hex[:10]}"
    yield name
    if docker("container", "inspect", name, timeout=30).returncode == 0:
        docker("rm", "-f", name)


# ----------------------------------------------------------------------------- runs


def test_echo_hello(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> None:
    done = scrun_docker(docker, "--rm", IMAGE, "echo", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"


def test_a_program_that_is_not_there_exits_127(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> None:
    """As docker reports it through runc: crun on the node exited 1 (scrun-cdi-run)."""
    done = scrun_docker(docker, "--rm", IMAGE, "no-such-program")
    assert done.returncode == 127, done.stderr
    assert "executable file `no-such-program` not found" in done.stderr, done.stderr


def test_job_id_and_exit_code(
    cluster: Cluster,
    docker: Docker,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
    docker_leftovers: Callable[..., None],
) -> None:
    cidfile = tmp_path / "cid"
    done = scrun_docker(
        docker, "--rm", "--cidfile", str(cidfile), IMAGE, "sh", "-c", "echo $SLURM_JOB_ID; exit 3"
    )
    assert done.returncode == 3, done.stderr
    assert re.fullmatch(r"[0-9]+\n", done.stdout), repr(done.stdout)
    # ... and that job is the one scrun allocated for this very container
    job = cluster.run(["scontrol", "show", "job", done.stdout.strip()], timeout=30)
    assert job.returncode == 0, job.stderr
    container_id = cidfile.read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", container_id), container_id
    assert f"Comment={job_tag(container_id)}" in job.stdout, job.stdout


def test_stdin_reaches_the_container(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> None:
    # `eof` is printed only once cat saw the end of stdin
    done = scrun_docker(docker, "-i", "--rm", IMAGE, "sh", "-c", "cat; echo eof", input="a\nb\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a\nb\neof\n"


def test_writes_to_a_bind_mount_come_back(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> None:
    """`-v DIR:/out` of the login host's own disk (the cluster's scrun.lua carries it to the
    node): what the container writes and deletes there is so on the login host after."""
    out = Path(f"/var/tmp/scrun-docker-bind-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    (out / "old").write_text("old\n")
    try:
        program = "echo new > /out/new && rm /out/old"
        done = scrun_docker(docker, "--rm", "-v", f"{out}:/out", IMAGE, "sh", "-c", program)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in out.iterdir()) == ["new"]
        assert (out / "new").read_text() == "new\n"
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ----------------------------------------------------------------------------- failures


def test_bad_scrun_variable_fails_create(
    docker: Docker, no_leftovers: Callable[..., None], docker_leftovers: Callable[..., None]
) -> None:
    """docker reads the cause from scrun's JSON log (--log-format json) into its error."""
    done = scrun_docker(docker, "--rm", "-e", "SCRUN_TIMELIMIT=soon", IMAGE, "true")
    assert done.returncode == 125, (done.stdout, done.stderr)
    assert "OCI runtime create failed" in done.stderr, done.stderr
    assert "invalid SCRUN_TIMELIMIT='soon'" in done.stderr, done.stderr
    assert done.stdout == ""


def test_exec_runs_in_the_container(
    cluster: Cluster,
    docker: Docker,
    container_name: str,
    no_leftovers: Callable[..., None],
    docker_leftovers: Callable[..., None],
) -> None:
    """docker exec: --process, --detach and --pid-file from containerd's shim; the exit
    code of a process that ran, or of one crun could not start (127, 126)."""
    started = scrun_docker(docker, "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    done = docker(
        "exec", "-e", "WHO=exec", "-w", "/tmp", container_name, "sh", "-c", "echo $WHO $PWD; exit 6"
    )
    assert (done.returncode, done.stdout) == (6, "exec /tmp\n"), done.stderr
    fed = docker("exec", "-i", container_name, "cat", input="piped\n")
    assert (fed.returncode, fed.stdout) == (0, "piped\n"), fed.stderr
    # a command crun cannot start: runc makes docker say 126 for both, before the process
    # would run; scrun's exec has returned by then, and the node's says 127 or 126 as podman
    missing = docker("exec", container_name, "no-such-program")
    assert missing.returncode == 127, missing.stderr
    assert "executable file `no-such-program` not found" in missing.stderr, missing.stderr
    denied = docker("exec", container_name, "/etc/passwd")
    assert denied.returncode == 126, denied.stderr
    # the container itself goes on
    state = docker("inspect", "--format", "{{.State.Status}}", container_name)
    assert state.stdout.strip() == "running", state.stderr
    assert started.stdout.strip() in scrun_jobs(cluster)
    removed = docker("rm", "-f", container_name)
    assert removed.returncode == 0, removed.stderr


# ----------------------------------------------------------------------------- stop


def test_stop_kills_after_the_timeout_and_ends_the_job(
    cluster: Cluster,
    docker: Docker,
    container_name: str,
    no_leftovers: Callable[..., None],
    docker_leftovers: Callable[..., None],
) -> None:
    # sleep is the container's pid 1 (exec) and has no TERM handler: stop needs its SIGKILL
    script = 'echo "ready $SLURM_JOB_ID"; exec sleep 300'
    started = scrun_docker(docker, "-d", "--name", container_name, IMAGE, "sh", "-c", script)
    assert started.returncode == 0, started.stderr
    container_id = started.stdout.strip()

    logs: list[subprocess.CompletedProcess[str]] = []

    def ready() -> bool:
        logs.append(docker("logs", container_name, timeout=30))
        return "ready" in logs[-1].stdout

    wait_for(
        "the container's 'ready' line in docker logs",
        ready,
        20,
        lambda: f"docker logs: {logs[-1].stdout!r} (stderr {logs[-1].stderr!r})",
    )
    match = re.fullmatch(r"ready ([0-9]+)\n", logs[-1].stdout)
    assert match, logs[-1].stdout
    job_id = match.group(1)
    # the running container is that job, and squeue knows it by the container's id
    assert scrun_jobs(cluster).get(container_id) == (job_id, "RUNNING")

    began = time.monotonic()
    stopped = docker("stop", "-t", "2", container_name, timeout=60)
    took = time.monotonic() - began
    assert stopped.returncode == 0, stopped.stderr
    inspected = docker(
        "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container_name
    )
    assert inspected.stdout.split() == ["exited", "137"], inspected.stderr
    assert 2.0 <= took < 2.0 + KILL_WITHIN, f"docker stop -t 2 took {took:.1f}s"
    removed = docker("rm", container_name)
    assert removed.returncode == 0, removed.stderr
    wait_for(
        f"job {job_id} gone from squeue",
        lambda: container_id not in scrun_jobs(cluster),
        15,
        lambda: "still listed",
    )
