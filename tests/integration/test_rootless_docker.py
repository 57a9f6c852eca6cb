"""Rootless docker (dockerd under rootlesskit, as upstream documents it for scrun) through
scrun, as an unprivileged user: the same end-to-end checks as rootless podman. The module
starts the user's dockerd (harness/rootless-docker.sh) and stops it again."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import wait_for
from users import IMAGE, REPO, User, assert_users_clean, errors, pick_users

if TYPE_CHECKING:
    from conftest import Cluster

SCRIPT = REPO / "harness" / "rootless-docker.sh"
# its exit status when this docker cannot run rootless with the host's network (docker 28.5)
UNSUPPORTED = 3


@dataclass(frozen=True)
class RootlessDocker:
    user: User
    host: str  # unix:///run/user/<uid>/...sock
    runtime_root: Path  # what dockerd passes scrun as --root

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`docker ARGS` as the user, against their rootless dockerd."""
        argv = shlex.join(["/usr/bin/docker", *args])
        return self.user.sh(argv, env={"DOCKER_HOST": self.host}, **kwargs)

    def run(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`docker run --runtime scrun --network none ARGS`."""
        return self("run", "--runtime", "scrun", "--network", "none", *args, **kwargs)


def _script(action: str, user: User, cluster: Cluster) -> subprocess.CompletedProcess[str]:
    return cluster.run([str(SCRIPT), action, user.name, str(cluster.dir)], timeout=120)


@pytest.fixture(scope="module")
def docker(cluster: Cluster) -> Iterator[RootlessDocker]:
    alice = pick_users(cluster.exports, cluster.slurm_conf)[0]
    started = _script("up", alice, cluster)
    if started.returncode == UNSUPPORTED:
        pytest.skip(started.stderr.strip().rpartition("UNSUPPORTED: ")[2])
    if started.returncode != 0 or "DOCKER_HOST=" not in started.stdout:
        _script("down", alice, cluster)
        pytest.fail(f"harness/rootless-docker.sh up failed:\n{started.stderr}", pytrace=False)
    host = started.stdout.strip().split("DOCKER_HOST=", 1)[1]
    root = Path(f"/run/user/{alice.uid}/scrun-test-docker/runtime-runc/moby")
    yield RootlessDocker(alice, host, root)
    stopped = _script("down", alice, cluster)
    assert stopped.returncode == 0, stopped.stderr


@pytest.fixture
def clean(docker: RootlessDocker) -> Iterator[None]:
    """No job, anchor or container directory of the user's left; none in docker's root."""
    yield
    assert_users_clean(docker.user)
    wait_for(
        f"{docker.runtime_root} empty",
        lambda: not [p for p in docker.runtime_root.iterdir() if p.is_dir()],
        15,
    )


@pytest.fixture
def name(docker: RootlessDocker) -> Iterator[str]:
    container = f"rootless-d-{uuid.uuid4().hex[:10]}"
    yield container
    docker("rm", "-f", container)


def test_echo_job_id_exit_code_stdin(docker: RootlessDocker, clean: None) -> None:
    done = docker.run("--rm", IMAGE, "sh", "-c", "echo hi $SLURM_JOB_ID")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"hi [0-9]+\n", done.stdout), done.stdout
    assert errors(done.stderr) == []
    assert docker.run("--rm", IMAGE, "sh", "-c", "exit 3").returncode == 3
    piped = docker.run("-i", "--rm", IMAGE, "cat", input="through stdin\n")
    assert (piped.returncode, piped.stdout) == (0, "through stdin\n"), piped.stderr


def test_detached_job_is_the_users_then_kill_stop_rm(
    docker: RootlessDocker, name: str, clean: None
) -> None:
    alice = docker.user
    script = 'trap "exit 7" USR1; echo "ready $SLURM_JOB_ID"; while true; do sleep 1; done'
    assert docker.run("-d", "--name", name, IMAGE, "sh", "-c", script).returncode == 0

    def ready() -> str | None:
        match = re.search(r"ready ([0-9]+)", docker("logs", name).stdout)
        return match.group(1) if match else None

    job = wait_for("the container's ready line", ready, 30)
    assert alice.jobs().get(job, "").startswith(f"{alice.name} "), alice.jobs()
    assert docker("kill", "-s", "USR1", name).returncode == 0
    waited = docker("wait", name, timeout=60)
    assert waited.stdout.strip() == "7", (waited.stdout, waited.stderr)
    assert docker("rm", name).returncode == 0
    assert docker.run("-d", "--name", name, IMAGE, "sleep", "300").returncode == 0
    assert docker("stop", "-t", "1", name, timeout=60).returncode == 0
    assert docker("rm", name).returncode == 0


def test_sigkill_gives_137(docker: RootlessDocker, name: str, clean: None) -> None:
    assert docker.run("-d", "--name", name, IMAGE, "sleep", "300").returncode == 0
    assert docker("kill", "-s", "KILL", name).returncode == 0
    waited = docker("wait", name, timeout=60)
    assert waited.stdout.strip() == "137", (waited.stdout, waited.stderr)


def test_exec(docker: RootlessDocker, name: str, clean: None) -> None:
    """The exec step runs on the node, although the shim's working directory (under
    rootlesskit's private /run) is not there: no complaint about it in the output."""
    assert docker.run("-d", "--name", name, IMAGE, "sleep", "300").returncode == 0
    done = docker("exec", name, "echo", "in")
    assert (done.returncode, done.stdout) == (0, "in\n"), done.stderr
    assert errors(done.stderr) == []
    assert docker("rm", "-f", name).returncode == 0


def test_eight_at_once(docker: RootlessDocker, clean: None) -> None:
    def one(index: int) -> tuple[int, str]:
        done = docker.run("--rm", "-e", f"I={index}", IMAGE, "sh", "-c", "echo n$I")
        return done.returncode, done.stdout

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    assert results == [(0, f"n{index}\n") for index in range(8)]


def test_writes_to_a_bind_mount_come_back(docker: RootlessDocker, clean: None) -> None:
    """As with root's dockerd: a directory of the user's on the login host's own disk, written
    to and deleted from on the node, is so on the login host after."""
    person = docker.user
    out = Path(f"/var/tmp/scrun-rootless-docker-bind-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    (out / "old").write_text("old\n")
    for path in (out, out / "old"):
        os.chown(path, person.uid, person.uid)
    try:
        program = "echo new > /out/new && rm /out/old"
        done = docker.run("--rm", "-v", f"{out}:/out", IMAGE, "sh", "-c", program)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in out.iterdir()) == ["new"]
        assert (out / "new").stat().st_uid == person.uid
    finally:
        shutil.rmtree(out, ignore_errors=True)
