"""Rootless podman through scrun, as an unprivileged user (harness/test-users.sh), end to
end: the container is a Slurm job of that user. Nothing may be left behind: no job, no
anchor, no spool directory in the user's root."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import SEED_SCRIPT
from helpers import READ_ONLY_PROBE, READ_ONLY_SEEN, SCRUN_PODMAN, wait_for
from users import (
    IMAGE,
    REPO,
    User,
    assert_users_clean,
    errors,
    pick_users,
    user_site,
)

if TYPE_CHECKING:
    from conftest import Cluster, SiteRuntime


@pytest.fixture(scope="module")
def alice(cluster: Cluster) -> User:
    return pick_users(cluster.exports, cluster.slurm_conf)[0]


@pytest.fixture
def clean(alice: User) -> Iterator[None]:
    """After the test: no job scrun made for the user, no anchor, nothing in their root."""
    yield
    assert_users_clean(alice)


@pytest.fixture
def name(alice: User) -> Iterator[str]:
    """A unique container name; force-removed afterwards if the test left it."""
    container = f"rootless-{uuid.uuid4().hex[:10]}"
    yield container
    if alice.podman("container", "exists", container).returncode == 0:
        alice.podman("rm", "-f", "-t", "0", container)


# ----------------------------------------------------------------------------- basics


@pytest.mark.parametrize("which", [0, 1], ids=["first user", "second user"])
def test_out_of_the_box(cluster: Cluster, which: int) -> None:
    """What a user types, with nothing set up by hand (after make cluster-up): the container
    runs, and its job is theirs."""
    person = pick_users(cluster.exports, cluster.slurm_conf)[which]
    done = person.sh(f"podman --runtime scrun run --rm {IMAGE} sh -c 'echo hi $SLURM_JOB_ID'")
    assert done.returncode == 0, done.stderr
    match = re.fullmatch(r"hi ([0-9]+)\n", done.stdout)
    assert match, done.stdout
    assert errors(done.stderr) == []
    record = person.sh(f"scontrol -o show job {match.group(1)}").stdout
    assert f" UserId={person.name}({person.uid}) " in record, record
    assert_users_clean(person)


def test_exit_code_and_stdin(alice: User, clean: None) -> None:
    assert alice.podman("run", "--rm", IMAGE, "sh", "-c", "exit 3").returncode == 3
    done = alice.podman("run", "-i", "--rm", IMAGE, "cat", input="through stdin\n")
    assert (done.returncode, done.stdout) == (0, "through stdin\n"), done.stderr


def test_a_bind_mount_the_user_cannot_read_whole_runs(alice: User, clean: None) -> None:
    """`-v /tmp:/tmp` on a login node: the shipped script copies a directory the nodes do
    not see, and a user cannot read other users' files in it. The container runs, as
    through crun, without them (it could not read them either)."""
    source = Path(tempfile.mkdtemp(dir="/var/tmp"))
    private = source / "someone-elses"
    private.mkdir(mode=0o700)  # root's, as made by this (root) test
    (private / "theirs").write_text("theirs\n")
    os.chown(source, alice.uid, alice.gid)
    try:
        done = alice.podman("run", "--rm", "-v", f"{source}:/x", IMAGE, "ls", "/x")
        assert (done.returncode, errors(done.stderr)) == (0, []), done.stderr
        assert (private / "theirs").read_text() == "theirs\n"
    finally:
        shutil.rmtree(source)


def test_a_read_only_keep_id_container_cannot_write_its_image(alice: User, clean: None) -> None:
    """cwltool's options, `--read-only --userns=keep-id`: the image's directories cannot be
    written, as through crun (the image cache's overlays were read-write)."""
    done = alice.podman(
        "run", "--rm", "--read-only", "--userns=keep-id", IMAGE, "sh", "-c", READ_ONLY_PROBE
    )
    assert (done.returncode, done.stdout) == (0, READ_ONLY_SEEN), done.stderr


def test_tty(alice: User, clean: None) -> None:
    """`run -t` as a user (rootless runtime on the node): the container's stdin and stdout
    are a terminal that `tty` names (see test_podman_runtime.py::test_tty_under_a_pty)."""
    inner = "[ -t 0 ] && echo IN-TTY; [ -t 1 ] && echo OUT-TTY; tty; echo T-OK"
    podman = shlex.join([*SCRUN_PODMAN, "run", "-t", "--rm", IMAGE, "sh", "-c", inner])
    done = alice.sh(f"script -qec {shlex.quote(podman)} /dev/null")
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.replace("\r", "").splitlines()
    assert {"IN-TTY", "OUT-TTY", "T-OK"} <= set(lines), done.stdout
    assert any(re.fullmatch(r"/dev/pts/\d+", line) for line in lines), done.stdout


def test_exec_tty_names_the_containers_terminal(alice: User, name: str, clean: None) -> None:
    """`exec -t` as a user: the node's rootless crun makes the pty in the container's own
    /dev/pts and sends it to scrun's relay on the node (test_exec.py has root's)."""
    started = alice.podman("run", "-d", "--name", name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    podman = shlex.join([*SCRUN_PODMAN, "exec", "-t", name, "tty"])
    try:
        done = alice.sh(f"script -qec {shlex.quote(podman)} /dev/null")
    finally:
        removed = alice.podman("rm", "-f", "-t", "0", name)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert re.fullmatch(r"/dev/pts/\d+\r?\n", done.stdout), done.stdout
    assert removed.returncode == 0, removed.stderr


def test_detached_job_is_the_users_then_stop_kill_rm(alice: User, name: str, clean: None) -> None:
    script = 'trap "exit 7" USR1; echo "ready $SLURM_JOB_ID"; while true; do sleep 1; done'
    started = alice.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", script)
    assert started.returncode == 0, started.stderr

    def ready() -> str | None:
        match = re.search(r"ready ([0-9]+)", alice.podman("logs", name).stdout)
        return match.group(1) if match else None

    job = wait_for("the container's ready line", ready, 30)
    assert alice.jobs().get(job, "").startswith(f"{alice.name} "), alice.jobs()
    killed = alice.podman("kill", "-s", "USR1", name)  # the trap ends it
    assert killed.returncode == 0, killed.stderr
    waited = alice.podman("wait", name, timeout=60)
    assert waited.stdout.strip() == "7", (waited.stdout, waited.stderr)
    assert alice.podman("rm", name).returncode == 0
    second = alice.podman("run", "-d", "--name", name + "b", IMAGE, "sleep", "300")
    assert second.returncode == 0, second.stderr
    stopped = alice.podman("stop", "-t", "1", name + "b", timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert alice.podman("rm", name + "b").returncode == 0
    wait_for(f"job {job} gone", lambda: job not in alice.jobs(), 20)


def test_sigkill_gives_137(alice: User, name: str, clean: None) -> None:
    assert alice.podman("run", "-d", "--name", name, IMAGE, "sleep", "300").returncode == 0
    assert alice.podman("kill", "-s", "KILL", name).returncode == 0
    waited = alice.podman("wait", name, timeout=60)
    assert waited.stdout.strip() == "137", (waited.stdout, waited.stderr)
    assert alice.podman("rm", name).returncode == 0


def test_eight_at_once(alice: User, clean: None) -> None:
    def one(index: int) -> tuple[int, str]:
        done = alice.podman("run", "--rm", "-e", f"I={index}", IMAGE, "sh", "-c", "echo n$I")
        return done.returncode, done.stdout

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    assert results == [(0, f"n{index}\n") for index in range(8)]


# ----------------------------------------------------------------------------- options


def test_scrun_variables_shape_the_users_job(alice: User, name: str, clean: None) -> None:
    started = alice.podman(
        "run", "-d", "--name", name, "-e", "SCRUN_PARTITION=second", "-e",
        f"SCRUN_JOB_NAME={name}", IMAGE, "sleep", "300",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    jobs = wait_for("the job in squeue", lambda: alice.jobs(), 20)
    assert f"{alice.name} second {name}" in jobs.values(), jobs
    assert alice.podman("rm", "-f", "-t", "0", name).returncode == 0


def test_in_the_users_own_allocation(alice: User, clean: None) -> None:
    held = alice.sh("salloc --no-shell -J held 2>&1", timeout=60)
    match = re.search(r"Granted job allocation ([0-9]+)", held.stdout)
    assert match, held.stdout
    job = match.group(1)
    try:
        done = alice.podman(
            "run", "--rm", "-e", f"SLURM_JOB_ID={job}", IMAGE, "sh", "-c", "echo $SLURM_JOB_ID"
        )
        assert (done.returncode, done.stdout) == (0, f"{job}\n"), done.stderr
        state = alice.sh(f"squeue -h -j {job} -o %T").stdout.strip()
        assert state == "RUNNING", "scrun must never end an allocation it joined"
    finally:
        alice.sh(f"scancel {job}")


def test_unset_or_missing_xdg_runtime_dir(alice: User, clean: None) -> None:
    """No logind: XDG_RUNTIME_DIR unset (rootless podman then uses /run/user/<uid>), or
    naming a directory that does not exist (made when the user may, else one clear line).
    podman 5 itself refuses an XDG_RUNTIME_DIR that does not exist, before it calls scrun
    (podman 4.3 goes on, and scrun makes its root there or says why it cannot)."""
    podman_major = int(alice.sh("podman --version").stdout.split()[-1].split(".")[0])
    settings = {
        "unset XDG_RUNTIME_DIR": None,
        f"export XDG_RUNTIME_DIR=/tmp/gone-{alice.uid}-x": f"/tmp/gone-{alice.uid}-x",
    }
    for setting, missing in settings.items():
        done = alice.sh(f"{setting}; podman --runtime scrun run --rm {IMAGE} echo ok")
        if missing and podman_major >= 5:
            assert done.returncode != 0 and f"lstat {missing}: no such file" in done.stderr
        else:
            assert (done.returncode, done.stdout) == (0, "ok\n"), (setting, done.stderr)
    alice.sh(f"rm -rf /tmp/gone-{alice.uid}-x")
    done = alice.sh(f"XDG_RUNTIME_DIR=/nonexistent/x podman --runtime scrun run --rm {IMAGE} true")
    assert done.returncode != 0
    if podman_major >= 5:
        assert "lstat /nonexistent: no such file" in done.stderr, done.stderr
    else:
        assert errors(done.stderr) == [
            "Error: scrun: cannot create runtime root /nonexistent/x/scrun: Permission denied: "
            "OCI permission denied"
        ], done.stderr


# ----------------------------------------------------------------------------- storage


def storage_env(alice: User, tmp: str, driver: str) -> dict[str, str]:
    """A private config and image store for the user, with the given storage driver."""
    base = alice.home / tmp
    setup = (
        f"rm -rf {base}; mkdir -p {base}/config/containers {base}/data; "
        f"cp ~/.config/containers/containers.conf {base}/config/containers/; "
        f'printf \'[storage]\\ndriver = "{driver}"\\nrunroot = "{base}/run"\\n\' '
        f"> {base}/config/containers/storage.conf"
    )
    assert alice.sh(setup).returncode == 0
    env = {"XDG_CONFIG_HOME": f"{base}/config", "XDG_DATA_HOME": f"{base}/data"}
    tarball = Path(alice.slurm_conf).parents[1] / "containers" / "busybox-rootfs.tar"
    with tarball.open("rb") as image:
        imported = alice.sh(
            f"podman import -q - {IMAGE} >/dev/null", env=env, stdin=image, timeout=120
        )
    assert imported.returncode == 0, imported.stderr
    return env


@pytest.fixture
def private_storage(alice: User) -> Iterator[Callable[[str], dict[str, str]]]:
    made: list[str] = []

    def make(driver: str) -> dict[str, str]:
        made.append(f"scrun-test-{driver}")
        return storage_env(alice, made[-1], driver)

    yield make
    for tmp in made:
        # podman keeps overlay storage's own directory mounted in its namespace
        path = alice.home / tmp
        mount = path / "data/containers/storage/overlay"
        alice.sh(f"podman unshare sh -c 'umount -R {mount}; rm -rf {path}'")
        assert not path.exists(), f"{path} left behind"


def test_overlay_storage_without_scrun_lua_fails_at_create(
    alice: User,
    site_runtime: Callable[[str | None], SiteRuntime],
    private_storage: Callable[[str], dict[str, str]],
    clean: None,
) -> None:
    env = {**private_storage("overlay"), **user_site(alice, site_runtime(None))}
    done = alice.podman("run", "--rm", IMAGE, "true", env=env)
    assert done.returncode != 0
    message = errors(done.stderr)
    assert len(message) == 1, done.stderr
    assert "mount (overlay) that exists only in rootless podman's" in message[0], message
    assert "stage it with a scrun.lua" in message[0] and "vfs" in message[0], message


def test_vfs_storage_in_the_shared_home_runs_without_scrun_lua(
    alice: User,
    site_runtime: Callable[[str | None], SiteRuntime],
    private_storage: Callable[[str], dict[str, str]],
    clean: None,
) -> None:
    """vfs storage is plain directories: in the home directory, which the nodes share, the
    nodes run the container where podman keeps it, with no scrun.lua."""
    env = {**private_storage("vfs"), **user_site(alice, site_runtime(None))}
    done = alice.podman("run", "--rm", IMAGE, "cat", "/etc/passwd", env=env)
    assert (done.returncode, done.stdout) == (0, "root:x:0:0:root:/root:/bin/sh\n"), done.stderr


# ----------------------------------------------------------------------------- scrun.lua


def test_man_page_scrun_lua_with_a_shared_scratch_path(
    alice: User,
    cluster: Cluster,
    site_runtime: Callable[[str | None], SiteRuntime],
    seed_script: str,
    name: str,
    clean: None,
) -> None:
    """The man page's script, with its scratch_path on the shared dir, stages from inside
    podman's namespaces into <scratch>/<uid>/slurm/scrun/<id>/ as the user, maps the
    container's root to the user, and stage-out removes the copy. The container runs on
    the node in crun's user namespace of the user: its uid 0 is the user."""
    env = user_site(alice, site_runtime(seed_script))
    scratch = Path(cluster["SCRUN_SHARED_DIR"]) / str(alice.uid) / "slurm" / "scrun"
    program = "cat /proc/self/uid_map; echo up; sleep 300"
    started = alice.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", program, env=env)
    assert started.returncode == 0, started.stderr
    cid = alice.podman("inspect", "--format", "{{.Id}}", name, env=env).stdout.strip()
    staged = scratch / cid
    wait_for("the container's output", lambda: "up" in alice.podman("logs", name, env=env).stdout)
    uid_map = alice.podman("logs", name, env=env).stdout.split()
    assert uid_map[:3] == ["0", str(alice.uid), "1"], uid_map
    for path in (staged, staged / "config.json", staged / "rootfs" / "bin" / "busybox"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (alice.uid, alice.gid), path
        assert info.st_mode & 0o002 == 0, f"{path} is world-writable"
    removed = alice.podman("rm", "-f", "-t", "0", name, env=env)
    assert removed.returncode == 0, removed.stderr
    wait_for(f"stage-out removing {staged}", lambda: not staged.exists(), 30)


def test_scrun_stage_and_lua_check_as_the_user(alice: User, cluster: Cluster, clean: None) -> None:
    """The man page's script as shipped (scratch_path /run/user) stages and stages out by
    hand: scrun-stage runs on this host, where its copy is."""
    bundle = cluster.bundle
    work = f"/tmp/scrun-stage-{alice.name}-{uuid.uuid4().hex[:8]}"
    bin_dir = REPO / ".venv" / "bin"
    copy = f"rm -rf {work}; mkdir -p {work}; cp -a {bundle} {work}/bundle"
    assert alice.sh(copy).returncode == 0
    try:
        check = alice.sh(
            f"{bin_dir}/scrun-lua-check --dry-run --bundle {work}/bundle {SEED_SCRIPT}"
        )
        assert check.returncode in (0, 1), check.stdout + check.stderr
        assert "slurm_scrun_stage_in" in check.stdout, check.stdout
        staged = alice.sh(
            f"{bin_dir}/scrun-stage both --allocate --bundle {work}/bundle "
            f"--script {SEED_SCRIPT} --id stage-{alice.name}"
        )
        assert staged.returncode == 0, staged.stdout + staged.stderr
        assert "== slurm_scrun_stage_out: ok" in staged.stdout, staged.stdout
        assert f"SCRUN_USER={alice.name}" in staged.stdout, staged.stdout
    finally:
        alice.sh(f"rm -rf {work}")


def test_man_page_scrun_lua_stages_overlay_storage(
    alice: User,
    cluster: Cluster,
    site_runtime: Callable[[str | None], SiteRuntime],
    seed_script: str,
    private_storage: Callable[[str], dict[str, str]],
    clean: None,
) -> None:
    """Overlay storage, which only podman's namespace sees, works once scrun.lua copies the
    rootfs from inside that namespace to where the nodes can read it."""
    env = {**private_storage("overlay"), **user_site(alice, site_runtime(seed_script))}
    done = alice.podman("run", "--rm", IMAGE, "sh", "-c", "cat /etc/passwd; id -u", env=env)
    assert (done.returncode, done.stdout) == (0, "root:x:0:0:root:/root:/bin/sh\n0\n"), done.stderr
    scratch = Path(cluster["SCRUN_SHARED_DIR"]) / str(alice.uid) / "slurm" / "scrun"
    wait_for("stage-out emptying the scratch dir", lambda: not any(scratch.iterdir()), 30)
