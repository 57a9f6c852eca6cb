"""scrun-stage cache list|verify|prune on a cache laid out as docs/scrun-lua's scripts lay it
out; its stamps taken as the scripts take them (the script's own shell function, run for
real); its command lines' composition (pytest-subprocess)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from plumbum import local
from scrun_stage import cache, node_cache
from scrun_stage.main import main
from scrunlib import log

if TYPE_CHECKING:
    from plumbum.commands.base import BaseCommand

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scrun-lua"
UID = os.getuid()


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(tmp_path / "no-site.toml"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    yield
    log.configure(log.LogSettings())


def script_stamp(rootfs: Path) -> str:
    """The stamp shared-scratch.lua writes at an import: its own `stamp` function."""
    [function] = re.findall(r"^stamp\(\) \{.*\}$", (DOCS / "shared-scratch.lua").read_text(), re.M)
    done = subprocess.run(
        ["/bin/sh", "-c", f'{function}\nstamp "$1"', "sh", str(rootfs)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def make_entry(root: Path, name: str, *, users: tuple[str, ...] = (), used: float = 0) -> Path:
    """An entry as an import leaves it: rootfs, stamp, users/, used; `used` its last use."""
    entry = root / name
    (entry / "rootfs" / "etc").mkdir(parents=True)
    (entry / "rootfs" / "etc" / "os").write_text(f"{name}\n")
    (entry / "users").mkdir()
    for user in users:
        (entry / "users" / user).touch()
    (entry / "stamp").write_text(script_stamp(entry / "rootfs") + "\n")
    (entry / "used").touch()
    if used:
        os.utime(entry / "used", (used, used))
    (root / f"{name.removesuffix('.tmp')}.lock").touch()
    return entry


KEYS = [f"{digit}" * 64 for digit in "abcd"]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A user's cache: a (used long ago, unused), b (in use by c1), c (recently used,
    unused), an import of d killed half way, and one set aside."""
    root = tmp_path / "scratch" / str(UID) / "scrun-cache"
    root.mkdir(parents=True)
    make_entry(root, KEYS[0], used=1_000_000)
    make_entry(root, KEYS[1], users=("c1",), used=2_000_000)
    make_entry(root, KEYS[2], used=3_000_000)
    (root / f"{KEYS[3]}.tmp" / "rootfs").mkdir(parents=True)
    make_entry(root, f"changed-{KEYS[0]}-42", used=500_000)
    return tmp_path / "scratch"


def stage(*argv: str) -> int:
    return main(list(argv))


def test_the_stamp_is_the_scripts(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "sh").write_text("x" * 100)
    first = cache.stamp(rootfs)
    assert first == script_stamp(rootfs)
    (rootfs / "bin" / "sh").write_text("y" * 101)
    assert cache.stamp(rootfs) == script_stamp(rootfs) != first


def test_list_shows_each_entry_least_recently_used_first(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stage("cache", "list", "--scratch", str(scratch)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"cache {scratch}/{UID}/scrun-cache: 5 entries, ")
    rows = [line.split() for line in lines[2:]]
    assert [(row[0], row[-1]) for row in rows] == [
        (KEYS[0], "-"),  # the set-aside copy of a, used before a
        (KEYS[0], "-"),
        (KEYS[1], "c1"),
        (KEYS[2], "-"),
        (KEYS[3], "-"),  # never used: last
    ]
    states = [re.split(r"\s{2,}", line)[3] for line in lines[2:]]
    assert states == ["changed", "ok", "ok", "ok", "incomplete import"]


def test_verify_names_an_image_changed_after_its_import(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stage("cache", "verify", "--scratch", str(scratch)) == 0
    assert capsys.readouterr().out.count("ok ") == 3
    (scratch / str(UID) / "scrun-cache" / KEYS[2] / "rootfs" / "etc" / "os").write_text("!\n")
    assert stage("cache", "verify", "--scratch", str(scratch)) == 1
    out, err = capsys.readouterr()
    assert f"CHANGED           {KEYS[2]}" in out
    assert err == f"scrun-stage: error: changed after their import: {KEYS[2]}\n"


def test_prune_removes_what_no_container_uses(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = scratch / str(UID) / "scrun-cache"
    with open(root / f"{KEYS[3]}.lock", "a") as lock:  # an import of d under way
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert stage("cache", "prune", "--scratch", str(scratch)) == 0
    out = capsys.readouterr().out
    assert f"in use   {KEYS[1]} by c1" in out
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [KEYS[1], f"{KEYS[3]}.tmp"]


def test_prune_forgets_the_layers_of_the_images_it_removed(scratch: Path) -> None:
    """The keys the scripts remember for an engine's image layers (`layers/<digest>`) go
    with their entries; those of entries kept stay."""
    root = scratch / str(UID) / "scrun-cache"
    (root / "layers").mkdir()
    for digest, key in (("1" * 64, KEYS[0]), ("2" * 64, KEYS[1]), ("3" * 64, "not a key")):
        (root / "layers" / digest).write_text(f"{key}\n")
    assert stage("cache", "prune", "--scratch", str(scratch)) == 0
    assert [p.name for p in (root / "layers").iterdir()] == ["2" * 64]  # b's: in use
    (root / KEYS[1] / "users" / "c1").unlink()
    assert stage("cache", "prune", "--scratch", str(scratch)) == 0
    assert not (root / "layers").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="root prunes another user's cache")
def test_roots_prune_leaves_the_users_lock_the_users(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock root's prune makes is the cache owner's (a root-owned one would refuse the
    user's next import of that image); a link planted as a lock is not followed."""
    root = scratch / str(UID) / "scrun-cache"
    for path in [root, *root.iterdir()]:
        os.chown(path, 1001, 1001, follow_symlinks=False)
    (root / f"{KEYS[0]}.lock").unlink()
    target = scratch / "roots-file"
    target.write_text("")
    (root / f"{KEYS[2]}.lock").unlink()
    (root / f"{KEYS[2]}.lock").symlink_to(target)
    assert stage("cache", "prune", "--scratch", str(scratch), "--user", str(UID)) == 1
    lock = (root / f"{KEYS[0]}.lock").stat()
    assert (lock.st_uid, lock.st_gid) == (1001, 1001)
    assert not (root / KEYS[0]).exists()
    assert (root / KEYS[2]).is_dir() and target.stat().st_uid == 0
    assert capsys.readouterr().err == (
        f"scrun-stage: error: cannot lock {root / KEYS[2]}.lock:"
        " Too many levels of symbolic links\n"
    )


def test_prune_to_a_size_removes_the_least_recently_used_first(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """a and c hold 1 MiB each: down to 2 MiB, the set-aside copy and a (used before c) go,
    b is in use, c stays."""
    root = scratch / str(UID) / "scrun-cache"
    for key in (KEYS[0], KEYS[2]):
        (root / key / "rootfs" / "big").write_bytes(os.urandom(1024 * 1024))
    assert stage("cache", "prune", "--scratch", str(scratch), "--to-size", "2") == 0
    left = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert left == [KEYS[1], KEYS[2], f"{KEYS[3]}.tmp"], left
    removed = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert removed == [f"changed-{KEYS[0]}-42", KEYS[0]]


def test_another_users_cache_is_roots_to_name(
    scratch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    assert stage("cache", "list", "--scratch", str(scratch), "--user", str(UID)) == 2
    assert capsys.readouterr().err == (
        "scrun-stage: error: only root may name another user's cache (--user)\n"
    )


def test_the_scratch_is_the_site_scripts(
    scratch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --scratch: the scrun.lua beside slurm.conf names it."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=unit\n")
    text = (DOCS / "shared-scratch.lua").read_text()
    (etc / "scrun.lua").write_text(text.replace('"/scratch"', f'"{scratch}"', 1))
    assert stage("cache", "list", "-f", str(etc / "slurm.conf")) == 0
    assert f"cache {scratch}/{UID}/scrun-cache: 5 entries" in capsys.readouterr().out
    (etc / "scrun.lua").write_text("-- no scratch here\n")
    assert stage("cache", "list", "-f", str(etc / "slurm.conf")) == 2
    assert "sets no `local scratch" in capsys.readouterr().err


def test_no_cache_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stage("cache", "list", "--scratch", str(tmp_path)) == 2
    assert capsys.readouterr().err == (
        f"scrun-stage: error: no image cache at {tmp_path}/{UID}/scrun-cache\n"
    )


def test_du_is_composed_and_its_failure_named(fp, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    du = local["du"].executable
    fp.register([str(du), "-sk", "--", str(tmp_path)], stdout=f"1234\t{tmp_path}\n")
    assert cache.size_kib(tmp_path) == 1234
    fp.register([str(du), "-sk", "--", "/gone"], stderr="du: cannot access '/gone'\n", returncode=1)
    with pytest.raises(cache.CacheError, match=r"^measuring /gone failed \(exit 1\): du: cannot"):
        cache.size_kib(Path("/gone"))


# -- node-local.lua's copies on the nodes ------------------------------------------------


class OneNode(node_cache.Steps):
    """The node steps run here, as on node n1 (its step's shell, without srun)."""

    def command(self, script: str) -> BaseCommand:
        return local["env"]["SLURMD_NODENAME=n1", "/bin/sh", "-c", script]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """n1's node_local (`<dir>/scrun-<uid>/cache`): e (in use by c2, copied from the
    scratch's b), f (unused, used long ago), an import of d under way; the steps run here."""
    node_local = tmp_path / "node"
    root = node_local / f"scrun-{UID}" / "cache"
    root.mkdir(parents=True)
    for name, users, used in ((KEYS[1], ("c2",), 2_000_000), (KEYS[2], (), 1_000)):
        entry = make_entry(root, name, users=users, used=used)
        (entry / "node-stamp").write_text((entry / "stamp").read_text())
        (entry / "stamp").write_text("the scratch entry's\n")
    (root / f"{KEYS[3]}.tmp" / "rootfs").mkdir(parents=True)

    def steps_for(nodes: str, job_id: int | None, slurm_conf: str | None) -> node_cache.Steps:
        assert (nodes, job_id) == ("n1", None)
        return OneNode("srun", {}, nodes, job_id)

    monkeypatch.setattr(node_cache, "steps_for", steps_for)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return node_local


def on_nodes(scratch: Path, node: Path) -> list[str]:
    return ["--scratch", str(scratch), "--nodes", "n1", "--node-local", str(node)]


def test_list_shows_each_nodes_copies_too(
    scratch: Path, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stage("cache", "list", *on_nodes(scratch, node)) == 0
    out = capsys.readouterr().out
    assert f"cache {scratch}/{UID}/scrun-cache: 5 entries" in out
    _, _, nodes = out.partition(f"cache n1:{node}/scrun-{UID}/cache: 3 entries, ")
    rows = [re.split(r"\s{2,}", line) for line in nodes.splitlines()[2:]]
    assert [(row[0], row[3], row[4]) for row in rows] == [
        (KEYS[2], "ok", "-"),  # least recently used first
        (KEYS[1], "ok", "c2"),
        (KEYS[3], "incomplete import", "-"),
    ]


def test_verify_names_a_nodes_copy_changed_after_its_copy(
    scratch: Path, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node's copy is checked against its own stamp (node-stamp), as the script takes it."""
    assert stage("cache", "verify", *on_nodes(scratch, node)) == 0
    out = capsys.readouterr().out
    assert f"ok                {KEYS[2]} on n1\n" in out and out.count(" on n1\n") == 3
    copy = node / f"scrun-{UID}" / "cache" / KEYS[2]
    (copy / "rootfs" / "etc" / "os").write_text("!\n")
    assert stage("cache", "verify", *on_nodes(scratch, node)) == 1
    out, err = capsys.readouterr()
    assert f"CHANGED           {KEYS[2]} on n1\n" in out
    assert err == f"scrun-stage: error: changed after their import: {KEYS[2]} on n1\n"


def test_prune_removes_the_nodes_unused_copies(
    scratch: Path, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the node as on the scratch: what no container uses goes, under its lock (an
    import under way keeps its own), what one uses stays."""
    root = node / f"scrun-{UID}" / "cache"
    with open(root / f"{KEYS[3]}.lock", "a") as lock:  # the copy of d under way
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert stage("cache", "prune", *on_nodes(scratch, node)) == 0
    out = capsys.readouterr().out
    assert f"removed  {KEYS[2]} (1 MiB) on n1\n" in out
    assert f"in use   {KEYS[1]} by c2 on n1\n" in out
    assert f"{KEYS[3]}.tmp (1 MiB) on n1" not in out  # its lock was held: not removed
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [KEYS[1], f"{KEYS[3]}.tmp"]


@pytest.mark.skipif(UID != 0, reason="another user's cache is root's to read")
def test_a_node_cache_that_is_not_the_users_is_not_read(
    scratch: Path, node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root reading a user's copies (--user): a cache directory that is a link (which would
    lead root's prune anywhere), or not the user's, is named and left alone."""
    mine = node / f"scrun-{UID}"
    mine.rename(tmp_path / "elsewhere")
    mine.symlink_to(tmp_path / "elsewhere")
    assert stage("cache", "prune", *on_nodes(scratch, node)) == 0
    out = capsys.readouterr().out
    assert f"not read n1:{mine}/cache: {mine} is not the user's own directory" in out
    assert len(list((tmp_path / "elsewhere" / "cache").iterdir())) == 5  # entries, locks


def test_a_node_without_a_cache_says_so(
    scratch: Path, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(node / f"scrun-{UID}")
    assert stage("cache", "list", *on_nodes(scratch, node)) == 0
    assert f"cache n1:{node}/scrun-{UID}/cache: none\n" in capsys.readouterr().out


def test_the_node_steps_are_one_task_a_node(tmp_path: Path) -> None:
    """In a job of their own (srun waits a bounded time for the nodes: no job is left
    queued), or as steps of the caller's job; with exactly the environment given."""
    env = {"SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/usr/bin"}
    own = node_cache.Steps("/usr/bin/srun", env, "n[1-2]", None).command("true").formulate()
    head = ["env", "-i", "SLURM_CONF=/etc/slurm/slurm.conf", "PATH=/usr/bin", "/usr/bin/srun"]
    assert [Path(own[0]).name, *own[1:5]] == head
    assert own[5:] == [
        "--immediate=60", "--job-name=scrun-stage-cache", "--nodelist=n[1-2]",
        "--ntasks-per-node=1", "--quiet", "--", "/bin/sh", "-c", "true",
    ]  # fmt: skip
    in_job = node_cache.Steps("/usr/bin/srun", env, "n1", 42).command("true").formulate()
    assert in_job[5:8] == ["--overlap", "--jobid=42", "--nodelist=n1"]
