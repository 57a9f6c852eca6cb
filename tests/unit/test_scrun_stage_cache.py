"""scrun-stage cache list|verify|prune on a cache laid out as docs/scrun-lua's scripts lay it
out; its stamps taken as the scripts take them (the script's own shell function, run for
real); its command lines' composition (pytest-subprocess)."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from plumbum import local
from scrun_stage import cache
from scrun_stage.main import main
from scrunlib import log

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
