"""Two real users, A and B, with rootless podman through scrun: neither can see, reach or
steer the other's containers and jobs; scrun refuses state directories another user could
have planted; everything scrun makes is the caller's and not writable by others. The host's
root can still remove anyone's container."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import SEED_SCRIPT
from helpers import wait_for
from users import IMAGE, REPO, User, assert_users_clean, errors, pick_users

if TYPE_CHECKING:
    from conftest import Cluster

SCRUN = REPO / ".venv" / "bin" / "scrun"


@pytest.fixture(scope="module")
def pair(cluster: Cluster) -> tuple[User, User]:
    return pick_users(cluster.exports, cluster.slurm_conf)


@dataclass(frozen=True)
class Running:
    """A's detached container: podman's name and id, its job, its spool directory."""

    name: str
    cid: str
    job: str
    spool: Path


@pytest.fixture
def running(pair: tuple[User, User]) -> Iterator[Running]:
    """A container of A's, running (a job of A's), for B to try things on."""
    alice, bob = pair
    name = f"iso-{uuid.uuid4().hex[:10]}"
    script = 'echo "ready $SLURM_JOB_ID"; exec sleep 300'
    started = alice.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", script)
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip().splitlines()[-1]

    def ready() -> str | None:
        match = re.search(r"ready ([0-9]+)", alice.podman("logs", name).stdout)
        return match.group(1) if match else None

    job = wait_for("A's container running", ready, 30)
    yield Running(name, cid, job, alice.root / cid)
    alice.podman("rm", "-f", "-t", "0", name)
    assert_users_clean(alice, bob)


def still_running(alice: User, box: Running) -> None:
    """A's container and job are untouched."""
    status = alice.podman("inspect", "--format", "{{.State.Status}}", box.name).stdout.strip()
    assert status == "running", status
    assert box.job in alice.jobs(), f"A's job {box.job} is gone"
    state = json.loads((box.spool / "state.json").read_text())
    assert state["status"] == "running", state


# ----------------------------------------------------------------------------- B vs A


def test_b_cannot_read_as_spool_or_state(pair: tuple[User, User], running: Running) -> None:
    alice, bob = pair
    for command in (f"ls {running.spool}", f"cat {running.spool}/state.json", f"ls {alice.root}"):
        done = bob.sh(command)
        assert done.returncode != 0 and "Permission denied" in done.stderr, (command, done)
    still_running(alice, running)


def test_b_cannot_connect_to_as_anchor_socket(pair: tuple[User, User], running: Running) -> None:
    """Three walls: A's 0700 directories, the socket's 0600, and the anchor's own
    SO_PEERCRED check, tested here by letting B past the first two."""
    alice, bob = pair
    path = running.spool / "anchor.sock"
    assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    connect = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except PermissionError:\n"
        "    print('refused by the kernel'); sys.exit(0)\n"
        "try:\n"
        '    s.sendall(b\'{"op": "kill", "signal": 9}\\n\')\n'
        "except BrokenPipeError:  # refused before reading: the reply waits\n"
        "    pass\n"
        "print(s.recv(4096).decode().strip())\n"
    )
    done = bob.sh(f"python3 -c {shlex.quote(connect)} {path}")
    assert done.stdout.strip() == "refused by the kernel", done

    # Past the directories (a descriptor root opened) and the mode (made 0666 for the test):
    # the anchor sees B and says no.
    fd = os.open(path, os.O_PATH)
    path.chmod(0o666)
    try:
        done = subprocess.run(
            [sys.executable, "-c", connect, f"/proc/self/fd/{fd}"],
            pass_fds=(fd,),
            user=bob.uid,
            group=bob.gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        path.chmod(0o600)
        os.close(fd)
    assert done.stdout.strip(), done
    assert json.loads(done.stdout) == {"ok": False, "error": "permission denied"}, done
    still_running(alice, running)


@pytest.mark.parametrize("command", ["state", "kill", "start", "delete"])
def test_b_cannot_steer_as_container(
    pair: tuple[User, User], running: Running, command: str
) -> None:
    alice, bob = pair
    extra = ["--force"] if command == "delete" else []
    done = bob.sh(f"{SCRUN} --root {alice.root} {command} {' '.join(extra)} {running.cid}")
    assert done.returncode != 0, done
    assert done.stdout == ""
    lines = errors(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("scrun: error: "), done.stderr
    assert str(alice.root) in lines[0], lines
    still_running(alice, running)


def test_b_cannot_run_in_as_job(
    cluster: Cluster, pair: tuple[User, User], running: Running
) -> None:
    alice, bob = pair
    done = bob.podman("run", "--rm", "-e", f"SLURM_JOB_ID={running.job}", IMAGE, "true")
    assert done.returncode != 0
    assert f"job {running.job} belongs to {alice.name}({alice.uid}), not to you" in done.stderr
    bundle = cluster.bundle
    staged = bob.sh(
        f"{REPO}/.venv/bin/scrun-stage in --job-id {running.job} --bundle {bundle} "
        f"--script {SEED_SCRIPT}"
    )
    assert staged.returncode != 0, staged.stdout
    assert "not to you" in staged.stdout + staged.stderr, staged
    still_running(alice, running)


def test_root_can_delete_anyones_container(
    cluster: Cluster, pair: tuple[User, User], running: Running
) -> None:
    alice, _ = pair
    done = cluster.run(
        [str(SCRUN), "--root", str(alice.root), "delete", "--force", running.cid], timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert not running.spool.exists()
    wait_for(f"A's job {running.job} ended", lambda: running.job not in alice.jobs(), 20)


# ----------------------------------------------------------------------------- ownership


def test_what_scrun_makes_is_the_callers(pair: tuple[User, User], running: Running) -> None:
    alice, _ = pair
    paths = [alice.root, running.spool, *running.spool.iterdir()]
    # podman's --pid-file, which the anchor wrote: <runroot>/<driver>-containers/<id>/...
    pidfiles = list(
        Path(f"/run/user/{alice.uid}/containers").glob(f"*/{running.cid}/userdata/pidfile")
    )
    assert len(pidfiles) == 1, pidfiles
    paths += pidfiles
    for path in paths:
        info = path.lstat()
        assert info.st_uid == alice.uid, f"{path} belongs to uid {info.st_uid}"
        assert info.st_mode & 0o002 == 0, f"{path} is world-writable"
    for directory in (alice.root, running.spool):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


@pytest.fixture
def scratch(pair: tuple[User, User]) -> Iterator[Path]:
    """A directory in /tmp that both users can use; removed afterwards."""
    path = Path(f"/tmp/scrun-iso-{uuid.uuid4().hex[:8]}")
    path.mkdir()
    path.chmod(0o1777)  # like /tmp
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_planted_roots_are_refused(pair: tuple[User, User], scratch: Path) -> None:
    """B prepares a root for A; A's scrun refuses it instead of following it."""
    alice, bob = pair
    for setup, why in (
        (f"mkdir -m 700 {scratch}/b-root", "belongs to"),
        (
            f"mkdir -m 700 {scratch}/target; ln -s {scratch}/target {scratch}/b-root",
            "symbolic link",
        ),
    ):
        subprocess.run(["rm", "-rf", f"{scratch}/b-root", f"{scratch}/target"], check=True)
        assert bob.sh(setup).returncode == 0, setup
        for command in ("state x", "delete --force x", f"create --bundle {scratch} x"):
            done = alice.sh(f"{SCRUN} --root {scratch}/b-root {command}")
            lines = errors(done.stderr)
            assert done.returncode != 0 and len(lines) == 1, (setup, command, done)
            assert f"refusing runtime root {scratch}/b-root: it" in lines[0], lines
            assert why in lines[0], lines


def test_group_writable_own_root_is_refused(pair: tuple[User, User], scratch: Path) -> None:
    alice, _ = pair
    assert alice.sh(f"mkdir -m 770 {scratch}/a && chmod 770 {scratch}/a").returncode == 0
    done = alice.sh(f"{SCRUN} --root {scratch}/a state x")
    assert done.returncode != 0
    assert "writable by group or others (mode 0770" in done.stderr, done.stderr


def test_planted_container_dir_is_refused(pair: tuple[User, User]) -> None:
    alice, bob = pair
    assert alice.sh(f"mkdir -p -m 700 {alice.root}").returncode == 0
    planted = alice.root / f"planted-{uuid.uuid4().hex[:8]}"
    planted.mkdir()
    os.chown(planted, bob.uid, bob.gid)
    try:
        done = alice.sh(f"{SCRUN} state {planted.name}")
        assert done.returncode != 0
        assert f"refusing container directory {planted}: it belongs to {bob.name}" in done.stderr
    finally:
        planted.rmdir()
