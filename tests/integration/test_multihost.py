"""The compute nodes are other hosts (harness/node.sh): what they see, staging across that
boundary with the shipped scrun.lua scripts, as root and as both unprivileged users, and the
one line a user gets when a node cannot see what its container needs."""

from __future__ import annotations

import fcntl
import grp
import json
import os
import platform
import pwd
import re
import shlex
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import (
    MAN_26_05_SCRIPT,
    SEED_SCRIPT,
    node_roots,
    with_private_staging,
    with_scratch,
    with_scratch_path,
)
from helpers import copy_out, wait_for, waits_for_lock
from users import IMAGE, User, assert_users_clean, errors, one_error, pick_users, user_site

if TYPE_CHECKING:
    import subprocess

    from conftest import Cluster, Podman, SiteRuntime

MakeSite = Callable[[str | None], "SiteRuntime"]


def on_node(cluster: Cluster, node: str, script: str) -> subprocess.CompletedProcess[str]:
    return cluster.run(["srun", "-w", node, "-N1", "-n1", "/bin/sh", "-c", script], timeout=60)


# ----------------------------------------------------------------------------- topology


def test_each_node_is_a_host_of_its_own(
    cluster: Cluster, no_leftovers: Callable[..., None]
) -> None:
    roots = node_roots(cluster.env)
    assert sorted(roots) == ["n1", "n2"], roots
    shared = cluster["SCRUN_SHARED_DIR"]
    login_only = (
        "/var/lib/containers/storage",  # root podman's images and containers
        f"{cluster.dir}/docker",  # the private dockerd's data
        f"{cluster.dir}/containers",  # podman's private config
        "/var/tmp/scrun-storage",  # the test users' rootless image stores
    )
    probe = "; ".join(
        [
            "hostname",
            *(f"[ -e {shlex.quote(p)} ] && echo sees {p}" for p in login_only),
            f"[ -d {shlex.quote(shared)}/bundles ] || echo misses the shared dir",
            "[ -d /root ] || echo misses the homes",
            "true",
        ]
    )
    for node in roots:
        done = on_node(cluster, node, probe)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [node], done.stdout
    # and the login host does see them
    assert Path("/var/lib/containers/storage").is_dir()


def test_a_staged_container_runs_on_the_node_from_the_shared_dir(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """The cluster's scrun.lua (docs/scrun-lua/shared-scratch.lua) carries podman's bundle
    across: the rootfs the container runs from is the staged copy."""
    done = podman(
        "--runtime", "scrun", "run", "--rm", IMAGE, "sh", "-c",
        "awk '$5 == \"/\" {print $4}' /proc/self/mountinfo",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    root_line = done.stdout.splitlines()[0]
    assert "/scrun/" in root_line and root_line.endswith("/rootfs"), root_line


# ----------------------------------------------------------------------------- staging scripts


@pytest.fixture(scope="module")
def pair(cluster: Cluster) -> tuple[User, User]:
    return pick_users(cluster.exports, cluster.slurm_conf)


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


Who = tuple[int, Callable[["SiteRuntime"], Runner]]


@pytest.fixture(params=["root", "user1", "user2"])
def who(request: pytest.FixtureRequest, pair: tuple[User, User]) -> Iterator[Who]:
    """(uid, site → podman runner) for root's podman and each test user's rootless one."""
    if request.param == "root":

        def rootful(site: SiteRuntime) -> Runner:
            return site.podman

        yield os.getuid(), rootful
        return
    person = pair[0] if request.param == "user1" else pair[1]

    def rootless(site: SiteRuntime) -> Runner:
        env = user_site(person, site)

        def run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
            kwargs.pop("timeout", None)
            return person.podman(*args, env=env)

        return run

    yield person.uid, rootless
    assert_users_clean(person)


SCRIPT_TEXTS = {
    "node-local": lambda shared: with_scratch("node-local.lua", shared),
    "shared-scratch": lambda shared: with_scratch("shared-scratch.lua", shared),
    "man-page": lambda shared: with_scratch_path(SEED_SCRIPT, shared),
    "man-page-26.05": lambda shared: with_scratch_path(MAN_26_05_SCRIPT, shared),
}


@pytest.mark.parametrize("script", sorted(SCRIPT_TEXTS))
def test_staging_scripts_carry_the_container_there_and_back(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """Each shipped layout, with only its paths set: the container runs on a node from the
    staged copy, its output and exit code come back, stage-out brings its writes back into
    podman's copy, and no copy is left in the shared dir or on any node."""
    uid, runner = who
    shared = cluster["SCRUN_SHARED_DIR"]
    site = site_runtime(SCRIPT_TEXTS[script](shared))
    podman = runner(site)
    name = f"scrun-staged-{uuid.uuid4().hex[:10]}"
    # the root's path inside its filesystem (mountinfo's 4th field): where it was staged
    program = "awk '$5 == \"/\" {print $4}' /proc/self/mountinfo; echo written > /result; exit 7"
    done = podman("run", "--name", name, IMAGE, "sh", "-c", program)
    try:
        assert done.returncode == 7, done.stderr
        root_line = done.stdout.splitlines()[0]
        expected = {
            "node-local": f"/scrun-{uid}/",  # the node's /tmp: a tmpfs of its own
            "shared-scratch": f"/{uid}/scrun/",
            "man-page": "/slurm/scrun/",
            "man-page-26.05": "/slurm/scrun/",
        }[script]
        assert expected in root_line, root_line
        copied = copy_out(podman, name, "/result", "-")  # a tar stream of the file
        assert copied.returncode == 0, (copied.stderr, done.stderr)
        assert "written\n" in copied.stdout, (copied.stdout, done.stderr)
    finally:
        podman("rm", "-f", name)
    left = [path for root in node_roots(cluster.env).values() for path in node_copies(root, uid)]
    assert not left, f"node-local copies left: {left}"


def node_copies(root: Path, uid: int) -> list[str]:
    """What node-local.lua left on the node whose `/` is `root` for the user `uid`: its
    containers' copies, and the marks of its image cache's entries in use (the entries
    themselves stay, for the next container of the image)."""
    mine = root / "tmp" / f"scrun-{uid}"
    copies = [path for path in mine.glob("*") if path.name != "cache"]
    return [str(path) for path in (*copies, *mine.glob("cache/*/users/*"))]


def test_the_node_local_layout_stages_onto_every_node_of_the_job(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """A job of two nodes: stage-in copies the container onto each node's own disk, each
    node's task runs from its own copy, and stage-out removes the copies on both."""
    site = site_runtime(SCRIPT_TEXTS["node-local"](cluster["SCRUN_SHARED_DIR"]))
    program = "awk '$5 == \"/\" {print $4}' /proc/self/mountinfo"
    done = site.podman(
        "run", "--rm", "-e", "SCRUN_JOB_NUM_NODES=2", IMAGE, "sh", "-c", program
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    roots = done.stdout.splitlines()
    assert len(roots) == 2, done.stdout  # one task on each node
    assert all(f"/scrun-{os.getuid()}/" in root for root in roots), roots
    left = {node: node_copies(root, os.getuid()) for node, root in node_roots(cluster.env).items()}
    assert left == {"n1": [], "n2": []}, f"node-local copies left: {left}"


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_writes_to_a_bind_mount_the_nodes_cannot_see_come_back(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """`-v DIR:/out` of a directory on the login host's own disk (each node has its own
    /var/tmp): what the container writes there, and what it deletes, is so on the login host
    afterwards, as through crun (a hard link it made is one); a read-only mount is left as
    it was."""
    uid, runner = who
    podman = runner(site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])))
    out, inputs = (Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}") for _ in range(2))
    try:
        for directory in (out, inputs):
            (directory / "sub").mkdir(parents=True)
            (directory / "old").write_text("old\n")
            for path in (directory, directory / "sub", directory / "old"):
                os.chown(path, uid, uid)
        program = (
            "echo new > /out/sub/new && ln /out/sub/new /out/sub/link && rm /out/old"
            " && cat /in/old && ! rm /in/old"
        )
        done = podman(
            "run", "--rm", "-v", f"{out}:/out", "-v", f"{inputs}:/in:ro", IMAGE, "sh", "-c", program
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "old\n", done.stdout
        assert sorted(p.name for p in out.rglob("*")) == ["link", "new", "sub"]
        assert (out / "sub" / "new").read_text() == "new\n"
        assert (out / "sub" / "link").stat().st_ino == (out / "sub" / "new").stat().st_ino
        assert (out / "sub" / "new").stat().st_uid == uid
        assert (inputs / "old").read_text() == "old\n"
    finally:
        for directory in (out, inputs):
            shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_bind_mount_the_user_cannot_write_is_read_only_as_through_crun(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """`-v DIR:/x` of a root-owned directory (mode 755), and `-v FILE:/f` of a root-owned
    file (mode 644): a rootless container cannot write them, as through crun, though their
    copies are the user's (they are mounted read-only); root's can. Another mount with a
    directory the user may write stays writable."""
    uid, runner = who
    podman = runner(site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])))
    closed, mixed = (Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}") for _ in range(2))
    conf = closed.with_name(f"{closed.name}.conf")
    try:
        closed.mkdir(mode=0o755)
        (closed / "old").write_text("old\n")
        conf.write_text("conf\n")
        conf.chmod(0o644)
        (mixed / "open").mkdir(parents=True)
        os.chown(mixed / "open", uid, uid)
        program = "cat /x/old; echo w > /m/open/w; echo w >> /f; echo w > /x/new && echo wrote"
        done = podman(
            "run", "--rm", "-v", f"{closed}:/x", "-v", f"{mixed}:/m", "-v", f"{conf}:/f", IMAGE,
            "sh", "-c", program,
        )  # fmt: skip
        assert not [line for line in done.stderr.splitlines() if line.startswith("scrun:")]
        assert (mixed / "open" / "w").read_text() == "w\n"
        if uid == 0:
            assert (done.returncode, done.stdout) == (0, "old\nwrote\n"), done.stderr
            assert (closed / "new").read_text() == "w\n"
            assert conf.read_text() == "conf\nw\n"
        else:
            assert (done.returncode, done.stdout) == (1, "old\n"), done.stderr
            assert "/x/new: Read-only file system" in done.stderr, done.stderr
            assert "/f: Read-only file system" in done.stderr, done.stderr
            assert conf.read_text() == "conf\n"
            assert sorted(p.name for p in closed.iterdir()) == ["old"]
    finally:
        for directory in (closed, mixed):
            shutil.rmtree(directory, ignore_errors=True)
        conf.unlink(missing_ok=True)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_bind_mount_holding_what_the_user_cannot_read_runs_as_through_crun(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """`-v DIR:/d` of a directory holding a root-owned lost+found (mode 700) and file (mode
    600), as a filesystem's top directory does, `-v FILE:/s` of that file and `-v FILE:/w`
    of one it may write but not read: the container runs, as through crun, and cannot read
    those (they are left out of its copy, the file mounts are empty files) unless it is
    root's; what it writes comes back, and what it could not read is as it was."""
    uid, runner = who
    podman = runner(site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])))
    base = Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}")
    try:
        (base / "lost+found").mkdir(parents=True, mode=0o700)
        (base / "lost+found" / "kept").write_text("kept\n")
        (base / "secret").write_text("secret\n")
        (base / "secret").chmod(0o600)
        (base / "drop").write_text("drop\n")
        (base / "drop").chmod(0o622)  # a file others may write but not read
        (base / "open").mkdir(mode=0o777)
        (base / "open").chmod(0o777)
        (base / "open" / "in").write_text("in\n")
        program = (
            "cat /d/open/in && echo out > /d/open/out && (cat /d/secret || echo unread)"
            " && (cat /s 2>/dev/null; echo end) && { (echo more >> /w) 2>/dev/null || :; }"
        )
        done = podman(
            "run", "--rm", "-v", f"{base}:/d", "-v", f"{base / 'secret'}:/s",
            "-v", f"{base / 'drop'}:/w", IMAGE, "sh", "-c", program,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert not [line for line in done.stderr.splitlines() if line.startswith("scrun:")]
        expected = "in\nsecret\nsecret\nend\n" if uid == 0 else "in\nunread\nend\n"
        assert done.stdout == expected, done.stdout
        assert (base / "open" / "out").read_text() == "out\n"
        assert (base / "open" / "out").stat().st_uid == uid
        assert (base / "secret").read_text() == "secret\n"
        assert (base / "lost+found" / "kept").read_text() == "kept\n"
        # (a user's container gets the file it cannot read read-only: unlike crun, where
        # it could append, but its empty copy cannot replace what the file holds)
        assert (base / "drop").read_text() == ("drop\nmore\n" if uid == 0 else "drop\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_bind_mount_holding_the_scratch_comes_back_without_it(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """`-v DIR:/d` where DIR holds the scratch itself (`-v /tmp:/tmp` with the scratch under
    /tmp) and root's files: the scratch is left out of the copy both ways, the rest is
    carried (the copy is the user's: no owner or group is kept), and what the container
    writes comes back."""
    uid, runner = who
    outer = Path(cluster["SCRUN_SHARED_DIR"]) / f"outer-{uuid.uuid4().hex[:10]}"
    scratch = outer / "scratch"
    try:
        scratch.mkdir(parents=True)
        scratch.chmod(0o1777)  # as a site's /scratch
        os.chown(outer, uid, uid)  # the user's: a directory on the way to the scratch
        (outer / "theirs").write_text("theirs\n")
        podman = runner(site_runtime(SCRIPT_TEXTS[script](str(scratch))))
        program = "cat /d/theirs && ls /d && echo new > /d/new"
        done = podman("run", "--rm", "-v", f"{outer}:/d", IMAGE, "sh", "-c", program)
        assert (done.returncode, errors(done.stderr)) == (0, []), done.stderr
        assert done.stdout == "theirs\ntheirs\n", done.stdout  # (not the scratch)
        assert (outer / "new").read_text() == "new\n"
        assert (outer / "new").stat().st_uid == uid
        assert not list((scratch / str(uid) / "scrun").glob("*"))
    finally:
        shutil.rmtree(outer, ignore_errors=True)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_bind_mount_of_a_group_directory_comes_back_as_through_crun(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """`-v DIR:/d` of a setgid directory of a group the user is not in (mode 2777, as a
    project's), holding files and a sticky directory (not setgid) that root owns and anyone
    may write,
    and a single-file mount of one: what the container makes takes the directory's group,
    what it appends to keeps its owner, group and contents, a date it sets stays; as
    through crun, and stage-out does not fail on what the user cannot chgrp or date (the
    container ends seconds after its writes, so that the root-owned directory's time in the
    copy and on the login host differ)."""
    uid, runner = who
    podman = runner(site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])))
    staff = grp.getgrnam("staff").gr_gid
    base = Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}")
    try:
        base.mkdir()
        (base / "sticky").mkdir()
        for path in (base / "old", base / "single"):
            path.write_text("old\n")
        for path, mode in ((base, 0o2777), (base / "sticky", 0o1777), (base / "old", 0o666)):
            os.chown(path, 0, staff)
            path.chmod(mode)
        (base / "single").chmod(0o666)
        program = (
            "echo new > /d/made && mkdir /d/dir && echo new > /d/dir/in && echo p > /d/sticky/p"
            " && echo more >> /d/old && echo more >> /s && touch -d 2001-01-01 /d/made && sleep 2"
        )
        done = podman(
            "run", "--rm", "-v", f"{base}:/d", "-v", f"{base / 'single'}:/s", IMAGE,
            "sh", "-c", program,
        )  # fmt: skip
        assert (done.returncode, errors(done.stderr)) == (0, []), done.stderr
        for name in ("made", "dir", "dir/in"):
            assert ((base / name).stat().st_uid, (base / name).stat().st_gid) == (uid, staff), name
        own = (uid, pwd.getpwuid(uid).pw_gid)  # (a directory that is not setgid)
        assert ((base / "sticky/p").stat().st_uid, (base / "sticky/p").stat().st_gid) == own
        assert (base / "dir").stat().st_mode & 0o2000
        assert time.gmtime((base / "made").stat().st_mtime).tm_year == 2001
        for name in ("old", "single"):
            assert (base / name).read_text() == "old\nmore\n", name
        assert ((base / "old").stat().st_uid, (base / "old").stat().st_gid) == (0, staff)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def tree(top: Path) -> dict[str, str]:
    """Each entry under `top`: a directory as "/", a symbolic link as "-> target", a file
    as its text."""
    found: dict[str, str] = {}
    for path in sorted(top.rglob("*")):
        name = str(path.relative_to(top))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[name] = "/"
        else:
            found[name] = path.read_text()
    return found


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_renames_and_replacements_in_a_bind_mount_come_back_as_through_crun(
    script: str, cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """A directory renamed (its contents keep their times), a directory replaced by a file
    and a file by a directory, in a bind mount the nodes cannot see; and a bind mount whose
    source is a symbolic link to a directory (mount(2) follows it): the login host has
    what crun would have left."""
    site = site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"]))
    base = Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}")
    try:
        (base / "d" / "dir1" / "sub").mkdir(parents=True)
        (base / "d" / "dir1" / "sub" / "x").write_text("x\n")
        (base / "d" / "todir").mkdir()
        (base / "d" / "todir" / "z").write_text("z\n")
        (base / "d" / "tofile").write_text("f\n")
        (base / "real").mkdir()
        (base / "real" / "r").write_text("r\n")
        (base / "link").symlink_to("real")
        program = (
            "mv /d/dir1 /d/dir2 && rm -r /d/todir && echo now > /d/todir && rm /d/tofile"
            " && mkdir /d/tofile && echo new > /l/new && rm /l/r && ls /l"
        )
        done = site.podman(
            "run", "--rm", "-v", f"{base}/d:/d", "-v", f"{base}/link:/l", IMAGE, "sh", "-c", program
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (0, "new\n"), done.stderr
        assert tree(base) == {
            "d": "/",
            "d/dir2": "/",
            "d/dir2/sub": "/",
            "d/dir2/sub/x": "x\n",
            "d/todir": "now\n",
            "d/tofile": "/",
            "link": "-> real",
            "real": "/",
            "real/new": "new\n",
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_stage_out_that_fails_is_told_on_the_containers_stderr(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """What the container wrote cannot go back (its bind mount's source became a file while
    it ran): the user reads why, and where it is kept, in one line; the container's exit
    code is its own."""
    base = Path(f"/var/tmp/scrun-bind-{uuid.uuid4().hex[:10]}")
    name = f"scrun-stage-out-{uuid.uuid4().hex[:10]}"
    base.mkdir()
    kept = None
    # it writes once /out/go is there (`podman exec` makes it, in the container's copy), a
    # second later: its end kills every process left in it, as through crun, and the exec's
    # touch may not have exited the moment its file appears
    program = "while [ ! -e /out/go ]; do sleep 0.1; done; sleep 1; echo x > /out/f; exit 3"
    try:
        started = podman.scrun(
            "run", "-d", "--name", name, "-v", f"{base}:/out", IMAGE, "sh", "-c", program
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        # where the failed stage-out keeps it, whatever part of the test fails
        kept = (
            Path(cluster["SCRUN_SHARED_DIR"]) / str(os.getuid()) / "scrun" / started.stdout.strip()
        )
        base.rmdir()
        base.write_text("not a directory any more\n")
        went = podman.scrun("exec", name, "touch", "/out/go")
        assert went.returncode == 0, went.stderr
        waited = podman.scrun("wait", name)
        assert (waited.returncode, waited.stdout.strip()) == (0, "3"), waited.stderr
        logs = podman.scrun("logs", name)
        told = [line for line in logs.stderr.splitlines() if line.startswith("scrun:")]
        assert len(told) == 1, logs.stderr
        assert told[0].startswith("scrun: error: stage-out failed: "), told
        found = re.search(r"what the container wrote is kept in (\S+)$", told[0])
        assert found is not None and Path(found.group(1)) == kept, told
        assert (kept / "mounts").is_dir(), told
    finally:
        podman.scrun("rm", "-f", name)
        if kept is not None:
            shutil.rmtree(kept, ignore_errors=True)
        base.unlink(missing_ok=True)


def cache_stamps(shared: str, uid: int) -> dict[str, int]:
    """The user's image cache entries on the scratch, each with its import's time."""
    cache = Path(shared) / str(uid) / "scrun-cache"
    return {stamp.parent.name: stamp.stat().st_mtime_ns for stamp in cache.glob("*/stamp")}


@pytest.fixture
def cluster_podman(podman: Podman) -> Podman:
    """The cluster's podman, under a name that leaves `podman` to a test's own runner."""
    return podman


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_an_image_is_staged_once_and_a_containers_changes_come_back(
    script: str,
    who: Who,
    cluster: Cluster,
    cluster_podman: Podman,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """Each layout's image cache, for root and for each test user (keep-id for
    them, whose root filesystem is out of the real user's reach): the first container of
    the image imports it at most once, the second copies nothing of it; what a container
    created, changed and deleted in its root (an overlay's writable layer on the node) is
    in podman's copy afterwards, as `podman diff` shows it; nothing stays marked in use."""
    uid, runner = who
    shared = cluster["SCRUN_SHARED_DIR"]
    podman = runner(site_runtime(SCRIPT_TEXTS[script](shared)))
    options = ["--userns=keep-id"] if uid != os.getuid() else []
    # keep-id runs as the user: its own files, in the world-writable /tmp and a new one
    where = "/tmp" if options else "/etc"
    program = f"echo new > {where}/new && mkdir {where}/newdir && echo f > {where}/newdir/f"
    if not options:  # root's container deletes one of the image's files too
        program += " && rm /etc/group"
    before = cache_stamps(shared, uid)
    names = [f"scrun-cached-{uuid.uuid4().hex[:10]}" for _ in range(3)]
    try:
        done = podman("run", "--name", names[0], *options, IMAGE, "sh", "-c", program)
        assert done.returncode == 0, done.stderr
        imported = cache_stamps(shared, uid)
        assert len(set(imported) - set(before)) <= 1, (before, imported)
        done = podman("run", "--name", names[1], *options, IMAGE, "sh", "-c", program)
        assert done.returncode == 0, done.stderr
        assert cache_stamps(shared, uid) == imported  # the second container imported nothing
        diff = podman("diff", names[1])
        assert diff.returncode == 0, diff.stderr
        changes = set(diff.stdout.split("\n"))
        assert {f"A {where}/new", f"A {where}/newdir", f"A {where}/newdir/f"} <= changes, changes
        if not options:
            assert "D /etc/group" in changes, changes
            # the image's directories keep their times (those of its writable layers), as
            # through crun
            times = "stat -c '%n %Y' /bin /usr"
            done = podman("run", "--rm", IMAGE, "sh", "-c", times)
            assert done.returncode == 0, done.stderr
            crun_times = cluster_podman("--runtime", "crun", "run", "--rm", IMAGE,
                                        "sh", "-c", times)  # fmt: skip
            assert done.stdout == crun_times.stdout != "", (done.stdout, crun_times.stdout)
            # changes that write no file (a deletion: a whiteout; a writable layer's own mode)
            # and none: what podman sees afterwards is what it sees of the same through crun
            for change, seen in [("rm /bin/ls", "D /bin/ls"), ("chmod 700 /tmp", "C /tmp"),
                                 ("true", "")]:  # fmt: skip
                name, crun_name = f"{names[2]}-{len(names)}", f"{names[2]}-crun-{len(names)}"
                names += [name, crun_name]
                done = podman("run", "--name", name, IMAGE, *change.split())
                assert done.returncode == 0, done.stderr
                diff = podman("diff", name)
                done = cluster_podman("--runtime", "crun", "run", "--name", crun_name, IMAGE,
                                      *change.split())  # fmt: skip
                assert done.returncode == 0, done.stderr
                through_crun = cluster_podman("diff", crun_name).stdout.splitlines()
                assert seen in through_crun or not seen, through_crun
                # Slurm 23.02 and later mount directories of their own into the step's
                # container: their mount points do not come back
                assert diff.stdout.splitlines() == through_crun, change
    finally:
        for name in names:
            podman("rm", "-f", name)


def run_to_its_end(
    site: SiteRuntime,
    bundle: Path,
    name: str,
    out: Path,
    err: Path,
    *,
    before_start: Callable[[], None] = lambda: None,
    while_running: Callable[[], None] = lambda: None,
) -> None:
    """The container `name` of `bundle` through the site's scrun, as an engine runs one:
    `create` (its stdout and stderr the files `out` and `err`), `before_start()`, `start`,
    `while_running()`, `state` until it says stopped, `delete --force` (also after a
    failure)."""
    try:
        with out.open("w") as stdout, err.open("w") as stderr:
            done = site.scrun("create", "--bundle", str(bundle), name, stdout=stdout, stderr=stderr)
        assert done.returncode == 0, err.read_text()
        before_start()
        assert site.scrun("start", name).returncode == 0
        while_running()

        def stopped() -> bool:
            return '"status": "stopped"' in site.scrun("state", name).stdout

        wait_for(f"{name} stopped", stopped, 60, err.read_text)
    finally:
        site.scrun("delete", "--force", name)


# A whole second, and the same second half a second later: rsync's own check (size and
# whole-second time) takes a file rewritten at its size within the second for unchanged.
SECOND = 1_700_000_000
SECOND_TEXT = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(SECOND))


@pytest.mark.parametrize("image_cache", ["true", "false"])
@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_only_what_the_container_changed_comes_back(
    script: str,
    image_cache: str,
    cluster: Cluster,
    site_runtime: MakeSite,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """Stage-out brings back what the container made, changed and deleted in its root
    filesystem and bind mounts, and nothing else: what the engine or the user wrote there
    while it ran stays, as through crun. A bundle whose root is the bundle directory itself
    (runtime-tools' conformance tests make them so) with `create`'s stdout and stderr in
    files inside it: the container's output is in them at its end (the copy back of the
    empty copies stage-in made replaced it, with the cache and without). A file the
    container rewrote at its size within the second of the host's last write comes back
    (rsync's own check skipped it). With the cache and without (a whole copy: it also
    deleted a file the host made meanwhile)."""
    text = SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])
    assert "local image_cache = true\n" in text
    site = site_runtime(
        text.replace("local image_cache = true\n", f"local image_cache = {image_cache}\n")
    )
    bundle, bound = tmp_path / "bundle", tmp_path / "bound"
    shutil.copytree(Path(cluster.bundle) / "rootfs", bundle, symlinks=True)
    bound.mkdir()
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["root"] = {"path": "."}
    config["mounts"].append({"destination": "/w", "source": str(bound), "options": ["rbind", "rw"]})
    program = (
        f"rm /etc/gone; echo 1 > /etc/same-size; touch -d '{SECOND_TEXT}' /etc/same-size; "
        f"echo 1 > /w/same-size; touch -d '{SECOND_TEXT}' /w/same-size; echo made > /made; "
        "echo the-output; echo the-errors >&2; sleep 3"
    )
    config["process"].update(args=["sh", "-c", program], terminal=False)
    (bundle / "config.json").write_text(json.dumps(config))
    (bundle / "etc" / "gone").write_text("x\n")
    for same_size in (bundle / "etc" / "same-size", bound / "same-size"):
        same_size.write_text("0\n")
        os.utime(same_size, ns=(SECOND * 10**9 + 5 * 10**8,) * 2)
    (bundle / "host-changed").write_text("before\n")
    out, err = bundle / "stdout-x", bundle / "stderr-x"

    def write_meanwhile() -> None:  # (the container runs 3 s)
        (bundle / "host-made").write_text("host\n")
        (bundle / "host-changed").write_text("after\n")

    name = f"scrun-back-{uuid.uuid4().hex[:10]}"
    run_to_its_end(site, bundle, name, out, err, while_running=write_meanwhile)
    assert (out.read_text(), err.read_text()) == ("the-output\n", "the-errors\n")
    assert (bundle / "host-made").read_text() == "host\n"
    assert (bundle / "host-changed").read_text() == "after\n"
    assert (bundle / "made").read_text() == "made\n"
    assert not (bundle / "etc" / "gone").exists()
    assert (bundle / "etc" / "same-size").read_text() == "1\n"
    assert (bound / "same-size").read_text() == "1\n"


@pytest.mark.parametrize("image_cache", ["true", "false"])
def test_a_scratch_of_whole_seconds_loses_no_change(
    image_cache: str,
    cluster: Cluster,
    site_runtime: MakeSite,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """Where the scratch keeps whole seconds only (Lustre), a change within the second of
    stage-in's mark is not newer than the mark: shared-scratch.lua then takes everything
    for changed, and what the container wrote to its root and to a bind mount comes back.
    (The marks are set to a whole second to come, which nothing the container does is newer
    than: before, its writes to the bind mount stayed on the node.)"""
    text = SCRIPT_TEXTS["shared-scratch"](cluster["SCRUN_SHARED_DIR"])
    site = site_runtime(
        text.replace("local image_cache = true\n", f"local image_cache = {image_cache}\n")
    )
    bundle, bound = tmp_path / "bundle", tmp_path / "bound"
    bundle.mkdir()
    bound.mkdir()
    (bound / "f").write_text("0\n")
    shutil.copytree(Path(cluster.bundle) / "rootfs", bundle / "rootfs", symlinks=True)
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["root"] = {"path": "rootfs"}  # (writable)
    config["mounts"].append({"destination": "/w", "source": str(bound), "options": ["rbind", "rw"]})
    program = "echo 1 > /w/f; echo made > /w/made; echo new > /etc/made; sleep 2"
    config["process"].update(args=["sh", "-c", program], terminal=False)
    (bundle / "config.json").write_text(json.dumps(config))
    name = f"scrun-seconds-{uuid.uuid4().hex[:10]}"
    staged = Path(cluster["SCRUN_SHARED_DIR"]) / str(os.getuid()) / "scrun" / name

    def marks_to_a_second_to_come() -> None:
        marks = [staged / "rootfs.since", *staged.glob("mounts/*.since")]
        assert len(marks) == 2, marks
        later = int(time.time()) + 60
        for mark in marks:
            os.utime(mark, (later, later))

    out, err = tmp_path / "out", tmp_path / "err"
    run_to_its_end(site, bundle, name, out, err, before_start=marks_to_a_second_to_come)
    assert ((bound / "f").read_text(), (bound / "made").read_text()) == ("1\n", "made\n")
    assert (bundle / "rootfs" / "etc" / "made").read_text() == "new\n"


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_whole_copys_changes_come_back_as_through_crun(
    script: str,
    cluster: Cluster,
    cluster_podman: Podman,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """Without the image cache (`image_cache = false`, for a scratch that cannot hold an
    overlay's writable layer: NFS, Lustre, GPFS) the whole root filesystem goes there and
    back: `podman diff` lists what it lists through crun, for a container that changed
    nothing and for one that wrote a file (neither directories' times nor Slurm's mount
    points come back)."""
    text = SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"])
    assert "local image_cache = true\n" in text
    site = site_runtime(text.replace("local image_cache = true\n", "local image_cache = false\n"))
    names: list[str] = []
    try:
        for change in ("true", "touch /x"):
            name, crun_name = (f"scrun-whole-{uuid.uuid4().hex[:10]}" for _ in range(2))
            names += [name, crun_name]
            done = site.podman("run", "--name", name, IMAGE, *change.split())
            assert done.returncode == 0, done.stderr
            done = cluster_podman("--runtime", "crun", "run", "--name", crun_name, IMAGE,
                                  *change.split())  # fmt: skip
            assert done.returncode == 0, done.stderr
            through_crun = cluster_podman("diff", crun_name).stdout.splitlines()
            assert cluster_podman("diff", name).stdout.splitlines() == through_crun, change
    finally:
        for name in names:
            cluster_podman("rm", "-f", name)


def test_the_nodes_of_a_container_share_its_root_on_the_shared_scratch(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """The cluster's scrun.lua gives a container of two nodes one root on the scratch they
    share: a file one node's task writes, the other's sees (over the image cache, each node
    mounted its own overlay of one writable layer, which the kernel leaves undefined: the
    other never saw it, and one node's task failed at times, 126); it comes back."""
    program = (
        "if mkdir /etc/first 2>/dev/null; then sleep 1; echo written > /etc/seen; sleep 4;"
        " else ls /etc/seen 2>/dev/null; sleep 3; cat /etc/seen; fi"
    )
    name = f"scrun-two-nodes-{uuid.uuid4().hex[:10]}"
    try:
        done = podman("--runtime", "scrun", "run", "--name", name, "-e",
                      "SCRUN_JOB_NUM_NODES=2", IMAGE, "sh", "-c", program)  # fmt: skip
        assert (done.returncode, done.stdout) == (0, "written\n"), done.stderr
        diff = podman("diff", name)
        assert {"A /etc/first", "A /etc/seen"} <= set(diff.stdout.splitlines()), diff.stdout
    finally:
        podman("rm", "-f", name)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
@pytest.mark.parametrize("mode", ["keep-id", "default", "user"])
def test_every_rootless_user_namespace_mode_runs_as_the_user(
    mode: str,
    script: str,
    pair: tuple[User, User],
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """Rootless podman's `--userns=keep-id` (cwltool's and podman-hpc's choice: its root
    filesystem belongs to the user's subordinate ids, out of the real user's reach), its
    default and `--user`: staged, run on a node as the container expects, and what the
    container writes to a bind mount belongs to the user on the login host."""
    site = site_runtime(SCRIPT_TEXTS[script](cluster["SCRUN_SHARED_DIR"]))
    for person in pair:
        options, uid_inside = {
            "keep-id": (["--userns=keep-id"], person.uid),
            "default": ([], 0),
            "user": (["--user", "4242:4242"], 4242),
        }[mode]
        out = Path(f"/var/tmp/scrun-userns-{uuid.uuid4().hex[:10]}")
        out.mkdir()
        os.chown(out, person.uid, person.uid)
        try:
            program = "id -u; echo written > /out/result"
            done = person.podman(
                "run", "--rm", *options, "-v", f"{out}:/out", IMAGE, "sh", "-c", program,
                env=user_site(person, site),
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert done.stdout == f"{uid_inside}\n", done.stdout
            assert (out / "result").read_text() == "written\n"
            assert (out / "result").stat().st_uid == person.uid
        finally:
            shutil.rmtree(out, ignore_errors=True)
        assert_users_clean(person)


MAPPED_ROOT = 100000  # the host uid of the container's root under --uidmap 0:100000:65536


@pytest.mark.parametrize("cache", ["cached", "whole"])
@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_roots_container_mapped_to_other_ids_runs_and_its_writes_come_back(
    script: str,
    cache: str,
    pair: tuple[User, User],
    cluster: Cluster,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """Root's podman with `--uidmap` (as `--userns=auto`, or dockerd's userns-remap): crun,
    run as root on the node, sets the container up as its mapped root, which must reach
    what is staged in root's private directories. It runs; what it writes to its root and
    to a bind mount comes back, as through crun; the staging directories stay unlistable
    by other users and the container's own is its mapped root's alone; nothing stays."""
    scratch, node_local = private_staging
    text = with_private_staging(script, private_staging, 3)
    if cache == "whole":
        text = text.replace("local image_cache = true\n", "local image_cache = false\n")
    site = site_runtime(text)
    mapping = [f"--{kind}map=0:{MAPPED_ROOT}:65536" for kind in ("uid", "gid")]
    out = Path(f"/var/tmp/scrun-mapped-{uuid.uuid4().hex[:10]}")
    name = f"scrun-mapped-{uuid.uuid4().hex[:10]}"
    out.mkdir()
    os.chown(out, MAPPED_ROOT, MAPPED_ROOT)
    try:
        program = "echo z > /z && rm /bin/ls && echo y > /out/f && id -u && exec sleep 60"
        done = site.podman("run", "-d", "--name", name, *mapping, "-v", f"{out}:/out",
                           IMAGE, "sh", "-c", program)  # fmt: skip
        assert done.returncode == 0, done.stderr
        container_id = done.stdout.strip()
        mine = scratch / str(os.getuid())
        if script == "shared-scratch":
            staged = [mine / "scrun" / container_id]
        else:
            node_dirs = [root / node_local.lstrip("/") for root in node_roots(cluster.env).values()]
            staged = [d / f"scrun-{os.getuid()}" / container_id for d in node_dirs]
        here = wait_for("its staged copy", lambda: next((p for p in staged if p.is_dir()), None))
        assert (here.stat().st_uid, here.stat().st_mode & 0o777) == (MAPPED_ROOT, 0o700)
        for directory in (mine, mine / "scrun", here.parent):
            assert directory.stat().st_mode & 0o777 in (0o700, 0o711), directory
        # (another user cannot see a node's directories from here at all)
        for path in [mine / "scrun", *([here] if script == "shared-scratch" else [])]:
            other = pair[0].sh(f"ls {shlex.quote(str(path))}")
            assert other.returncode != 0 and "Permission denied" in other.stderr, other
        # written, as its root (the mapped root is root inside): stopped while it sleeps
        wait_for("its writes", lambda: site.podman("logs", name).stdout == "0\n")
        stopped = site.podman("stop", "-t", "0", name)
        assert stopped.returncode == 0, stopped.stderr
        assert (out / "f").read_text() == "y\n"
        assert (out / "f").stat().st_uid == MAPPED_ROOT  # as crun leaves it
        diff = site.podman("diff", name)
        assert {"A /z", "D /bin/ls"} <= set(diff.stdout.splitlines()), diff.stdout
    finally:
        site.podman("rm", "-f", "-t", "0", name)
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_dev_shm_is_a_tmpfs_of_the_engines_size_on_the_node(
    script: str,
    who: Who,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """The engine's /dev/shm (a tmpfs it mounted on the login host for the container and
    bind-mounts into it: 64 MB, or --shm-size) is a tmpfs of that size on the node, as
    through crun: not a directory carried to the scratch, which would have no limit and
    put the container's shared memory there. Past its size a write fails."""
    _, runner = who
    podman = runner(site_runtime(with_private_staging(script, private_staging, 3)))
    program = (
        "grep ' /dev/shm ' /proc/mounts && head -c 4194304 /dev/zero >/dev/shm/fits"
        " && ! head -c 5242880 /dev/zero 2>/dev/null >/dev/shm/more"
    )
    done = podman("run", "--rm", "--shm-size", "8m", IMAGE, "sh", "-c", program)
    assert done.returncode == 0, done.stdout + done.stderr
    _, _, kind, options, *_ = done.stdout.split()
    assert kind == "tmpfs" and "size=8192k" in options.split(","), done.stdout


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_the_engines_etc_files_are_the_containers_as_through_crun(
    script: str,
    who: Who,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """/etc/hosts, /etc/resolv.conf and /etc/hostname, files the engine bind-mounts into the
    container, hold on the node what they hold through crun. podman 5 writes the first two
    after the runtime's create, when stage-in has copied them (empty then): the scripts'
    scrun_before_start copies them again as the container starts."""
    _, runner = who
    podman = runner(site_runtime(with_private_staging(script, private_staging, 3)))
    args = ("run", "--rm", "--add-host", "foo:192.0.2.9", "--hostname", "h1", IMAGE, "sh", "-c")
    program = "cat /etc/hosts; echo --; cat /etc/resolv.conf; echo --; cat /etc/hostname"
    through_crun = podman("--runtime", "crun", *args, program)
    assert through_crun.returncode == 0, through_crun.stderr
    done = podman(*args, program)
    assert done.returncode == 0, done.stderr
    assert "192.0.2.9\tfoo" in done.stdout.splitlines(), done.stdout
    assert done.stdout == through_crun.stdout


def notices(done: subprocess.CompletedProcess[str]) -> list[str]:
    """What a container that ran said on its stderr besides errors: scrun's notices."""
    assert done.returncode == 0, done.stderr
    return [line for line in errors(done.stderr) if line.startswith("scrun: ")]


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_first_import_says_so_on_the_containers_stderr(
    script: str,
    who: Who,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """With import_notice_seconds = 0 (a site's 3 s, for a test image that imports in
    less), the first container of an image not yet in the user's cache says on its stderr
    that it imports it (node-local.lua: and that it copies it to its node), and the second,
    on the same node, says nothing."""
    _, runner = who
    podman = runner(site_runtime(with_private_staging(script, private_staging, 0)))
    on_n1 = ["-e", "SCRUN_JOB_NODELIST=n1"]
    said = notices(podman("run", "--rm", *on_n1, IMAGE, "true"))
    expected = [r"scrun: importing image \(\d+ MiB\) to the cache"]
    if script == "node-local":
        expected.append(r"scrun: copying image \(\d+ MiB\) to node n1")
    assert len(said) == len(expected), said
    for line, pattern in zip(said, expected, strict=True):
        assert re.fullmatch(pattern, line), said
    assert notices(podman("run", "--rm", *on_n1, IMAGE, "true")) == []


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_container_waiting_for_anothers_import_says_so(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """While another holds the lock of its image (held here: on the scratch's cache entry,
    or, for node-local.lua, on the node's copy of it), a container past
    import_notice_seconds (0 here) says it waits, on its stderr; it goes on once the lock
    is free, and runs."""
    uid, runner = who
    podman = runner(site_runtime(with_private_staging(script, private_staging, 0)))
    on_n1 = ["-e", "SCRUN_JOB_NODELIST=n1"]
    assert notices(podman("run", "--rm", *on_n1, IMAGE, "true")) != []  # the import
    scratch, node_local = private_staging
    [key] = [p.parent.name for p in (scratch / str(uid) / "scrun-cache").glob("*/stamp")]
    if script == "node-local":
        node = node_roots(cluster.env)["n1"]
        lock = node / node_local.lstrip("/") / f"scrun-{uid}" / "cache" / f"{key}.lock"
        said = "scrun: waiting for another container's copy of this image to node n1"
    else:
        lock = scratch / str(uid) / "scrun-cache" / f"{key}.lock"
        said = "scrun: waiting for another container's import of this image"
    with ThreadPoolExecutor(1) as pool, open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = pool.submit(podman, "run", "--rm", *on_n1, IMAGE, "echo", "ran")
        wait_for("the container waits for the image's lock", lambda: waits_for_lock(lock))
        held.close()
        done = waiting.result()
    assert notices(done) == [said], done.stderr
    assert done.stdout == "ran\n"


# ----------------------------------------------------------------------------- clear errors


@pytest.fixture
def tmpfs(cluster: Cluster) -> Iterator[Callable[[Path, str], None]]:
    """Mounts a tmpfs with options on the login host, each unmounted at the test's end (and
    its mount point removed when the mount made it)."""
    mounted: list[tuple[Path, bool]] = []

    def mount(path: Path, options: str) -> None:
        made = not path.exists()
        path.mkdir(exist_ok=True)
        mounted.append((path, made))
        done = cluster.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)])
        assert done.returncode == 0, done.stderr

    yield mount
    for path, made in reversed(mounted):
        cluster.run(["umount", "-l", str(path)])
        if made:
            path.rmdir()


def set_immutable(path: Path, immutable: bool) -> None:
    """chattr +i / -i (not every platform's root has chattr): FS_IOC_GETFLAGS and SETFLAGS,
    FS_IMMUTABLE_FL."""
    get_flags, set_flags, flag = 0x80086601, 0x40086602, 0x10
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (flags,) = struct.unpack("i", fcntl.ioctl(fd, get_flags, struct.pack("i", 0)))
        flags = flags | flag if immutable else flags & ~flag
        fcntl.ioctl(fd, set_flags, struct.pack("i", flags))
    finally:
        os.close(fd)


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_cache_that_cannot_be_written_is_one_clear_line(
    script: str,
    who: Who,
    cluster: Cluster,
    site_runtime: MakeSite,
    no_leftovers: Callable[..., None],
) -> None:
    """The user's image cache cannot be written (made immutable here: its mode would not
    bind a rootless user's namespace, and a mount made now is not seen in it): one line
    naming it, and nothing staged."""
    uid, runner = who
    shared = Path(cluster["SCRUN_SHARED_DIR"])
    podman = runner(site_runtime(SCRIPT_TEXTS[script](str(shared))))
    mine = shared / str(uid)
    cache = mine / "scrun-cache"
    made = not cache.exists()
    for directory in (mine, cache):
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chown(directory, uid, uid)
    try:
        set_immutable(cache, True)
    except OSError as exc:
        pytest.skip(f"the scratch cannot make a directory immutable: {exc}")
    try:
        line = one_error(podman("run", "--rm", IMAGE, "true"))
        assert f"the image cache {cache} cannot be written: Operation not permitted" in line
        assert list((mine / "scrun").glob("*")) == []
    finally:
        set_immutable(cache, False)
        if made:
            cache.rmdir()


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_node_whose_kernel_cannot_overlay_is_one_clear_line(
    script: str,
    who: Who,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """The image cache's kernel check reads the job's nodes from Slurm (scontrol, with the
    slurm.conf scrun gives the script's commands). No node here runs a kernel too old for
    an overlay in a user namespace (they run this host's), so the test's copy of the script
    asks for one newer than any (Linux 99.0): the container is refused in one line naming
    its node and that node's kernel as Slurm reports it; nothing is imported or staged."""
    uid, runner = who
    text = with_private_staging(script, private_staging, 3)
    need = "overlay_major=5 overlay_minor=11\n"
    assert text.count(need) == 1
    podman = runner(site_runtime(text.replace(need, "overlay_major=99 overlay_minor=0\n")))
    line = one_error(podman("run", "--rm", "-e", "SCRUN_JOB_NODELIST=n1", IMAGE, "true"))
    assert (
        f"node n1 cannot run cached images: its kernel, Linux {platform.release()}, cannot make "
        "an overlay in a user namespace (Linux 99.0 or later can; or set image_cache = false)"
    ) in line, line
    scratch, _ = private_staging
    assert list((scratch / str(uid) / "scrun-cache").iterdir()) == []  # nothing imported


@pytest.mark.parametrize("script", ["node-local", "shared-scratch"])
def test_a_full_scratch_is_one_clear_line(
    script: str,
    cluster: Cluster,
    site_runtime: MakeSite,
    tmpfs: Callable[[Path, str], None],
    no_leftovers: Callable[..., None],
) -> None:
    """The scratch fills up while the image is imported: one line saying which is full;
    the half import is removed with the rest of what was staged (the nodes never see it).
    As root: a rootless user's namespace would not see the small filesystem mounted now."""
    scratch = Path(f"/var/tmp/scrun-full-{uuid.uuid4().hex[:10]}")
    tmpfs(scratch, "size=512k,mode=1777")
    site = site_runtime(with_scratch(f"{script}.lua", str(scratch)))
    line = one_error(site.podman("run", "--rm", IMAGE, "true"))
    assert f"failed: the scratch {scratch} is full" in line, line
    mine = scratch / str(os.getuid())
    left = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))
    kept = [p for p in left if not p.endswith(".lock") and "/.kernels-checked-" not in p]
    assert kept == ["scrun", "scrun-cache"], left


def test_without_scrun_lua_a_bundle_the_nodes_cannot_see_is_one_clear_line(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """Root podman's storage is the login host's own: without a scrun.lua the node cannot
    read the bundle, and the user is told which node, which path, and what fixes it."""
    site = site_runtime(None)
    done = site.podman("run", "--rm", IMAGE, "true")
    assert done.returncode != 0, done
    ours = [line for line in errors(done.stderr) if "scrun: error:" in line]
    assert len(ours) == 1, done.stderr
    assert "cannot read the container's bundle /var/lib/containers/" in ours[0], ours
    assert "node n1" in ours[0] or "nodes n1,n2" in ours[0], ours
    assert "scrun.lua" in ours[0], ours


def test_a_node_without_the_users_runtime_dir_is_one_clear_line(
    cluster: Cluster, pair: tuple[User, User], no_leftovers: Callable[..., None]
) -> None:
    """crun keeps its state in the node's /run/user/<uid> (oci.conf): a node where the
    user never logged in and lingering is off has none."""
    person = pair[1]
    roots = node_roots(cluster.env)
    missing = [root / "run" / "user" / str(person.uid) for root in roots.values()]
    for path in missing:
        shutil.rmtree(path)
    try:
        done = person.podman("run", "--rm", IMAGE, "true")
        assert done.returncode != 0, done
        ours = [line for line in errors(done.stderr) if "scrun: error:" in line]
        assert len(ours) == 1, done.stderr
        assert f"has no /run/user/{person.uid}, the user's runtime directory" in ours[0], ours
        assert "enable-linger" in ours[0], ours
    finally:
        for path in missing:
            path.mkdir(mode=0o700, exist_ok=True)
            os.chown(path, person.uid, person.gid)
    assert_users_clean(person)
    wait_for(
        "the user's staged copy removed",
        lambda: not list(Path(cluster["SCRUN_SHARED_DIR"]).glob(f"{person.uid}/scrun/*")),
    )
