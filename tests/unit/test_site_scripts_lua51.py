"""docs/scrun-lua's scripts in Lua 5.1, the Lua Debian builds Slurm's own scrun against.

Each script runs under lupa's Lua 5.1 with a stand-in `slurm` table (no Lua 5.2+ function such
as table.unpack) whose commands run for real with /bin/sh in a temporary tree, the nodes'
commands (remote_command) too, as on one node. So the tests see what the scripts do to
files: stage-in copies the root filesystem and only the bind mounts the nodes cannot see;
stage-out brings what the container wrote back, into bind mounts too (deletions included,
read-only ones left alone) and removes every copy; a staging path another user could change
is refused, with nothing staged.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lupa import lua51

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scrun-lua"
SCRIPTS = ["shared-scratch.lua", "node-local.lua"]
CONTAINER = "c1"
UID = os.getuid()
OTHER_UID = 54321  # no one's


def to_python(value: Any) -> Any:
    """A Lua table as JSON data: keys exactly 1..n make a list, others an object."""
    if lua51.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if items and set(items) == set(range(1, len(items) + 1)):
        return [to_python(items[i]) for i in range(1, len(items) + 1)]
    return {str(key): to_python(item) for key, item in items.items()}


# Runs a command (argv[2:]) as its parent and the subreaper of all it starts, as the
# anchor, the init of its own pid namespace, is of scrun.lua's commands; once the command
# has ended (and its killed processes have had a moment to die), appends to the file argv[1]
# a line for each process it left behind, reaped or still running, and exits as it did.
REAPER = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
time.sleep(0.3)
left = []
while True:
    try:
        orphan, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if orphan == 0:
        left.append("still running")
        break
    left.append(f"reaped {orphan}")
with open(sys.argv[1], "a") as report:
    report.writelines(line + "\\n" for line in left)
sys.exit(code if code >= 0 else 128 - code)
"""


class FakeSlurm:
    """The part of the `slurm` table the scripts call. Commands run with /bin/sh; remote
    ones as on the job's first node (SLURM_NODEID=0, SLURMD_NODENAME=n1). As scrun's
    runner does, a line of their output that starts with `scrun: ` goes to the user
    (`notices`, and `on_notice` as it comes), not into the output the script gets."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.commands: list[str] = []
        self.outputs: list[str] = []  # each command's
        self.notices: list[str] = []
        self.on_notice: Callable[[str], None] = lambda line: None
        self.errors: list[str] = []
        self.bundle = ""
        self.env: dict[str, str] = {}  # the job env's own variables
        self.path = os.environ["PATH"]
        # a file: each command runs under REAPER, which writes there what it left behind
        self.orphans: Path | None = None
        # a command that mounts an overlay: each command runs after it (on_engine_overlay)
        self.overlay: str | None = None

    def command(self, line: str, node: bool = False) -> tuple[int, str]:
        self.commands.append(line)
        on_node = {"SLURM_NODEID": "0", "SLURMD_NODENAME": "n1"} if node else {}
        env = {"PATH": self.path, **self.env, **on_node}
        argv = ["/bin/sh", "-c", line]
        if self.overlay is not None:  # in a mount namespace of its own, with the overlay
            wrapped = f'{self.overlay} && exec /bin/sh -c "$0"'
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                wrapped,
                line,
            ]
        if self.orphans is not None:
            argv = [sys.executable, "-I", "-c", REAPER, str(self.orphans), *argv]
        output = []
        with subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as child:
            assert child.stdout is not None
            for out in child.stdout:
                if out.startswith("scrun: "):
                    self.notices.append(out.rstrip("\n"))
                    self.on_notice(out.rstrip("\n"))
                else:
                    output.append(out)
            rc = child.wait(timeout=60)
        self.outputs.append("".join(output))
        return rc, "".join(output)

    def table(self) -> Any:
        def log_error(form: str, *args: Any) -> None:
            self.errors.append(form % tuple(args))

        def set_bundle_path(path: str) -> None:
            self.bundle = path

        return self.runtime.table_from(
            {
                "SUCCESS": 0,
                "ERROR": -1,
                "allocator_command": self.command,
                "remote_command": lambda line: self.command(line, node=True),
                "log_error": log_error,
                "from_json": lambda text: self.runtime.table_from(json.loads(text), recursive=True),
                "to_json": lambda value: json.dumps(to_python(value)),
                "set_bundle_path": set_bundle_path,
                "set_root_path": lambda path: None,
            }
        )


def start_ns(staged: str) -> int:
    """The newest `.since` mark of a staged bundle's bind mounts (0 when none)."""
    marks = list(Path(staged).glob("mounts/*.since")) if staged else []
    return max((mark.stat().st_mtime_ns for mark in marks), default=0)


class Site:
    """A login host's tree: podman's bundle and rootfs, a user's data directory, a read-only
    one, a home the nodes share; the scratch and the nodes' local disk."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        limit_mib: int = 1024,
        cache_mib: int = 20480,
        cache: bool = True,
        notice_s: int = 3,
    ) -> None:
        self.name = name
        self.scratch, self.node = tmp / "scratch", tmp / "node"
        self.scratch.mkdir(mode=0o1777)
        self.scratch.chmod(0o1777)
        self.node.mkdir(mode=0o1777)
        self.node.chmod(0o1777)
        self.bundle = tmp / "bundle"
        (self.bundle / "rootfs" / "etc").mkdir(parents=True)
        (self.bundle / "rootfs" / "etc" / "os").write_text("busybox\n")
        (self.bundle / "hosts").write_text("127.0.0.1 localhost\n")
        self.data, self.inputs = tmp / "data", tmp / "inputs"
        for directory in (self.data, self.inputs):
            (directory / "sub").mkdir(parents=True)
            (directory / "old").write_text("old\n")
        config = {
            "root": {"path": "rootfs"},
            "process": {"args": ["sh", "-c", "exit 3"], "env": ["PATH=/bin"]},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev/null", "type": "bind", "source": "/dev/null"},
                {"destination": "/home", "type": "bind", "source": "/home/u/data"},
                {"destination": "/etc/hosts", "type": "bind", "source": str(self.bundle / "hosts")},
                {"destination": "/data", "type": "bind", "source": str(self.data)},
                {"destination": "/in", "source": str(self.inputs), "options": ["rbind", "ro"]},
            ],
            "hooks": {"prestart": [{"path": "/usr/bin/engine-hook"}]},
            "linux": {"cgroupsPath": "engine.slice:c1", "namespaces": [{"type": "pid"}]},
        }
        (self.bundle / "config.json").write_text(json.dumps(config))
        text = (DOCS / name).read_text()
        settings = {
            'local scratch = "/scratch"': f'local scratch = "{self.scratch}"',
            "local carry_limit_mib = 1024": f"local carry_limit_mib = {limit_mib}",
        }
        settings["local cache_limit_mib = 20480"] = f"local cache_limit_mib = {cache_mib}"
        settings["local image_cache = true"] = f"local image_cache = {str(cache).lower()}"
        settings["local import_notice_seconds = 3"] = f"local import_notice_seconds = {notice_s}"
        if name == "node-local.lua":
            settings['local node_local = "/tmp"'] = f'local node_local = "{self.node}"'
        for line, value in settings.items():
            assert text.count(line + "\n") == 1, (name, line)
            text = text.replace(line + "\n", value + "\n")
        self.text = text
        self.runtime, self.slurm = self.load()

    def load(self) -> tuple[Any, FakeSlurm]:
        """The script in a Lua of its own, as each scrun process loads it."""
        runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
        slurm = FakeSlurm(runtime)
        runtime.globals().slurm = slurm.table()
        runtime.execute(self.text)
        return runtime, slurm

    @property
    def carried(self) -> Path:
        return self.scratch / str(UID) / "scrun" / CONTAINER

    def stage_in(self, container: str = CONTAINER, job_env: tuple[str, ...] = ()) -> int:
        """Stage-in of `container` (`job_env`: its job's "NAME=VALUE" entries); then wait
        until what it writes is newer than what was staged (file times tick every few ms: a
        container starts much later)."""
        hook = self.runtime.globals().slurm_scrun_stage_in
        config = str(self.bundle / "config.json")
        self.slurm.bundle = ""
        env = self.runtime.table_from(list(job_env))
        rc = int(hook(container, str(self.bundle), "/spool", config, 7, UID, UID, env))
        if rc != 0:  # (nothing to wait for; the scratch may not even be writable)
            return rc
        probe = self.scratch / "probe"
        start = time.monotonic_ns()
        while time.monotonic_ns() - start < 1e9:
            probe.touch()
            if probe.stat().st_ctime_ns > start_ns(self.slurm.bundle):
                break
        probe.unlink()
        return rc

    def stage_out(self, container: str = CONTAINER, bundle: str | None = None) -> int:
        hook = self.runtime.globals().slurm_scrun_stage_out
        bundle = bundle if bundle is not None else self.slurm.bundle or str(self.bundle)
        staged = bundle != str(self.bundle)
        root = f"{bundle}/rootfs" if staged else str(self.bundle / "rootfs")
        config = str(self.bundle / "config.json")
        return int(
            hook(container, bundle, str(self.bundle), root, str(self.bundle / "rootfs"),
                 "/spool", config, 7, UID, UID)
        )  # fmt: skip

    @property
    def cache(self) -> Path:
        return self.scratch / str(UID) / "scrun-cache"

    @property
    def node_cache(self) -> Path:
        """node-local.lua's cache on the node (each node has one)."""
        return self.node / f"scrun-{UID}" / "cache"

    @property
    def lower_cache(self) -> Path:
        """The cache a container's overlays read its image from: on the node, for
        node-local.lua."""
        return self.node_cache if self.name == "node-local.lua" else self.cache

    @property
    def users_dirs(self) -> list[str]:
        """What stays in the scratch once a container is gone: the user's own directories
        (and the image cache, whose entries no container uses any more)."""
        mine = self.scratch / str(UID)
        return [str(mine), *([str(self.cache)] if self.cache.exists() else []), str(mine / "scrun")]

    def leftovers(self) -> list[str]:
        """What is in the scratch and on the node, the cache's entries left out; and the
        caches' marks of entries in use (the scratch's, the node's)."""
        found = (*self.scratch.rglob("*"), *self.node.rglob(CONTAINER))
        in_use = [str(p) for c in (self.cache, self.node_cache) for p in c.glob("*/users/*")]
        outside = [p for p in found if not p.is_relative_to(self.cache) or p == self.cache]
        return [str(p) for p in outside] + in_use

    @staticmethod
    def written(staged: Path, path: str) -> Path:
        """Where what a container writes to `path` (relative to its root) lands in its
        staged bundle: a cached image's top-level directories are overlay mounts, whose
        writable layers are upper/<dir>."""
        top = path.split("/")[0]
        if "/" in path and (staged / "upper" / top).is_dir():
            return staged / "upper" / path
        return staged / "rootfs" / path


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_container_goes_there_and_back(tmp_path: Path, name: str) -> None:
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    written = json.loads((staged / "config.json").read_text())
    assert written["process"]["args"] == ["sh", "-c", "exit 3"]
    assert "hooks" not in written and "cgroupsPath" not in written["linux"]
    sources = [m["source"] for m in written["mounts"] if m.get("type") != "overlay"]
    assert sources[:3] == ["proc", "/dev/null", "/home/u/data"]  # the nodes see them
    assert sources[3:] == [f"{staged}/mounts/{i}" for i in (4, 5, 6)]
    # the image is read from the cache (node-local.lua: the node's), through an overlay
    [overlay] = [mount for mount in written["mounts"] if mount.get("type") == "overlay"]
    assert written["mounts"][0] == overlay and overlay["destination"] == "/etc"
    lower = Path(overlay["options"][0].removeprefix("lowerdir="))
    assert lower.is_relative_to(site.lower_cache) and (lower / "os").read_text() == "busybox\n"
    assert overlay["options"][1:] == [
        f"upperdir={staged}/upper/etc",
        f"workdir={staged}/work/etc",
        "userxattr",
        "volatile",
    ]
    assert (staged / "mounts" / "5" / "old").read_text() == "old\n"
    assert (staged / "mounts" / "4").read_text() == "127.0.0.1 localhost\n"
    assert oct(site.carried.stat().st_mode & 0o777) == "0o700"

    # what the container does on the node: in its root, its bind mounts, a read-only one
    (staged / "rootfs" / "result").write_text("written\n")
    site.written(staged, "etc/new").write_text("new\n")
    (staged / "mounts" / "5" / "old").unlink()
    (staged / "mounts" / "5" / "sub" / "new").write_text("new\n")
    (staged / "mounts" / "6" / "old").unlink()  # read-only: not carried back
    with (staged / "mounts" / "4").open("a") as hosts:
        hosts.write("10.0.0.1 node\n")
    assert site.stage_out() == 0, site.slurm.errors

    assert (site.bundle / "rootfs" / "result").read_text() == "written\n"
    assert (site.bundle / "rootfs" / "etc" / "new").read_text() == "new\n"
    assert not (site.data / "old").exists()  # deleted in the container: deleted here
    assert (site.data / "sub" / "new").read_text() == "new\n"
    assert (site.inputs / "old").read_text() == "old\n"
    assert (site.bundle / "hosts").read_text().endswith("10.0.0.1 node\n")
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_id_longer_than_a_file_name_is_staged_and_cleaned(tmp_path: Path, name: str) -> None:
    """Ids may have 1024 characters, file names 255 bytes: stage-in failed with "File name
    too long" for a 300-character id. Two long ids that share their first 100 characters
    get two directories."""
    site = Site(tmp_path, name)
    first, second = "a" * 299 + "1", "a" * 299 + "2"
    assert site.stage_in(first) == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    assert len(staged.name) < 255 and (staged / "rootfs").is_dir()
    assert site.stage_in(second) == 0, site.slurm.errors
    assert Path(site.slurm.bundle) != staged
    assert site.stage_out(second) == 0, site.slurm.errors
    assert site.stage_out(first, str(staged)) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_bind_mount_holding_the_scratch_leaves_it_out(tmp_path: Path, name: str) -> None:
    """`-v /tmp:/tmp` with the scratch under /tmp: the scratch is neither copied into
    itself nor removed by the copy back."""
    site = Site(tmp_path, name)
    config = json.loads((site.bundle / "config.json").read_text())
    config["mounts"][4]["source"] = str(tmp_path)
    (site.bundle / "config.json").write_text(json.dumps(config))
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    copy = staged / "mounts" / "5"
    assert (copy / "data" / "old").exists() and not (copy / "scratch").exists()
    (copy / "data" / "sub" / "new").write_text("new\n")
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.data / "sub" / "new").read_text() == "new\n"
    assert site.scratch.is_dir() and not site.carried.exists()


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_bind_mount_past_the_site_limit_is_refused(tmp_path: Path, name: str) -> None:
    site = Site(tmp_path, name, limit_mib=1)
    (site.data / "big").write_bytes(os.urandom(2 * 1024 * 1024))
    assert site.stage_in() != 0
    [error] = site.slurm.errors
    assert f"{site.data} holds 2 MiB, more than this site carries to the nodes (1 MiB)" in error
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.data / "old").exists()
    assert site.leftovers() == site.users_dirs


def squat(site: Site, path: Path, *, owner: int = OTHER_UID, mode: int = 0o700) -> None:
    path.mkdir(parents=True)
    os.chown(path, owner, owner)
    path.chmod(mode)


@pytest.mark.skipif(UID != 0, reason="making another user's directory needs root")
@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize(
    ("planted", "words"),
    [
        ("squatted", "belongs to uid 54321, not to you (uid 0)"),
        ("open", "is writable by others"),
        ("link", "is not a directory"),
    ],
)
def test_a_staging_path_another_user_can_change_is_refused(
    tmp_path: Path, name: str, planted: str, words: str
) -> None:
    site = Site(tmp_path, name)
    mine = site.scratch / str(UID)
    if planted == "squatted":  # made before the user's first container, by another user
        squat(site, mine)
    elif planted == "open":
        squat(site, mine, owner=UID, mode=0o777)
    else:
        elsewhere = tmp_path / "elsewhere"
        squat(site, elsewhere)
        mine.symlink_to(elsewhere)
    assert site.stage_in() != 0
    [error] = site.slurm.errors
    assert f"unsafe staging path: {mine} {words}" in error, error
    assert not site.slurm.bundle
    assert list(mine.iterdir()) == [] if mine.is_dir() else True
    assert site.stage_out() == 0, site.slurm.errors
    assert mine.exists() or mine.is_symlink()  # not the user's to remove


@pytest.mark.skipif(UID != 0, reason="making another user's directory needs root")
def test_a_node_local_path_another_user_made_is_refused(tmp_path: Path) -> None:
    site = Site(tmp_path, "node-local.lua")
    squat(site, site.node / f"scrun-{UID}")
    assert site.stage_in() != 0
    [error] = site.slurm.errors
    assert f"unsafe staging path: {site.node}/scrun-{UID} belongs to uid 54321" in error, error
    assert [p.name for p in site.cache.glob("*/users/*")] == [CONTAINER]  # staged, marked
    assert site.stage_out() == 0, site.slurm.errors
    assert not site.carried.exists()
    assert list(site.cache.glob("*/users/*")) == []  # the image is in the cache, unused


@pytest.mark.parametrize("name", SCRIPTS)
def test_two_containers_of_one_bind_mount_keep_each_others_writes(
    tmp_path: Path, name: str
) -> None:
    """Two containers of one `-v DIR` at once: each copies back what it changed (and
    deleted), not its whole copy, so neither undoes the other's writes."""
    site = Site(tmp_path, name)
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    assert site.stage_in("b") == 0, site.slurm.errors
    second = Path(site.slurm.bundle)
    (first / "mounts" / "5" / "a").write_text("a\n")
    (first / "mounts" / "5" / "old").unlink()
    (second / "mounts" / "5" / "b").write_text("b\n")
    assert site.stage_out("a", str(first)) == 0, site.slurm.errors
    assert site.stage_out("b", str(second)) == 0, site.slurm.errors
    assert sorted(p.name for p in site.data.iterdir()) == ["a", "b", "sub"]


def cache_entry(staged: Path) -> Path:
    return Path((staged / "cache-entry").read_text().strip())


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="mounts overlays (CI runs as root)")


def on_engine_overlay(
    site: Site, tmp: Path, layer: str = "storage/overlay/l/L1"
) -> tuple[Path, Path]:
    """The engine's root filesystem as podman's and docker's overlay drivers make it: an
    overlay mounted at the bundle's rootfs (each command mounts it in a mount namespace of
    its own), over an image layer, what Site put in the rootfs, at `layer` (in an engine's
    storage, as podman's short links are; returned first), with the container's writable
    layer (second), empty."""
    rootfs = site.bundle / "rootfs"
    lower, upper, work = tmp / layer, tmp / "upper", tmp / "work"
    lower.parent.mkdir(parents=True, exist_ok=True)
    rootfs.rename(lower)
    for directory in (rootfs, upper, work):
        directory.mkdir()
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    site.slurm.overlay = f"mount -t overlay overlay -o {options} {rootfs}"
    return lower, upper


@needs_root
@pytest.mark.parametrize("name", SCRIPTS)
def test_an_images_key_is_listed_once_for_the_engines_layers(tmp_path: Path, name: str) -> None:
    """A root filesystem the engine mounted as an overlay: the key found by listing it is
    remembered for its layers, and a later container of those layers takes it from there
    without listing the image. Shown here by a layer changed in place, which an engine never
    does: the later container still runs on the first one's entry. What it remembers goes
    with its entry."""
    site = Site(tmp_path, name)
    layer, upper = on_engine_overlay(site, tmp_path)
    assert site.stage_in("a") == 0, site.slurm.errors
    bundles = {"a": site.slurm.bundle}
    first = cache_entry(Path(site.slurm.bundle))
    [memo] = (site.cache / "layers").iterdir()
    assert memo.read_text() == f"{first.name}\n"
    (layer / "etc" / "os").write_text("changed in place\n")
    assert site.stage_in("b") == 0, site.slurm.errors
    bundles["b"] = site.slurm.bundle
    assert cache_entry(Path(site.slurm.bundle)) == first
    for container, bundle in bundles.items():
        assert site.stage_out(container, bundle) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs
    shutil.rmtree(first)  # (pruned: scrun-stage cache prune)
    (upper / "own").write_text("own\n")  # another image, imported: its memo alone is kept
    assert site.stage_in("c") == 0, site.slurm.errors
    assert [p.read_text() for p in (site.cache / "layers").iterdir()] == [
        f"{cache_entry(Path(site.slurm.bundle)).name}\n"
    ]
    assert site.stage_out("c") == 0, site.slurm.errors


@needs_root
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_key_remembered_on_one_login_host_is_not_used_on_another(
    tmp_path: Path, name: str
) -> None:
    """Two login hosts share the scratch, and their engines' layer paths may be alike
    (containerd numbers its snapshots): what one remembered another lists again."""
    site = Site(tmp_path, name)
    layer, _ = on_engine_overlay(site, tmp_path, layer="containerd/snapshots/12/fs")
    assert site.stage_in("a") == 0, site.slurm.errors
    first = site.slurm.bundle
    (layer / "etc" / "os").write_text("another host's image\n")
    other_host = tmp_path / "boot_id"
    other_host.write_text("0e5a6a4e-5d0c-4a51-9c3a-000000000001\n")
    assert site.slurm.overlay is not None
    site.slurm.overlay += f" && mount --bind {other_host} /proc/sys/kernel/random/boot_id"
    assert site.stage_in("b") == 0, site.slurm.errors
    other = cache_entry(Path(site.slurm.bundle))
    assert (other / "rootfs" / "etc" / "os").read_text() == "another host's image\n"
    assert len(list((site.cache / "layers").iterdir())) == 2
    for container, bundle in (("a", first), ("b", site.slurm.bundle)):
        assert site.stage_out(container, bundle) == 0, site.slurm.errors


@needs_root
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_lower_layer_outside_an_engines_storage_is_listed_each_time(
    tmp_path: Path, name: str
) -> None:
    """A directory of the user's as the overlay's lower layer (`podman run --rootfs DIR:O`)
    may change between containers: each lists it, and runs on what it holds then."""
    site = Site(tmp_path, name)
    layer, _ = on_engine_overlay(site, tmp_path, layer="home/me/rootfs")
    assert site.stage_in("a") == 0, site.slurm.errors
    first = site.slurm.bundle
    (layer / "etc" / "os").write_text("changed\n")
    assert site.stage_in("b") == 0, site.slurm.errors
    changed = cache_entry(Path(site.slurm.bundle))
    assert changed != cache_entry(Path(first))
    assert (changed / "rootfs" / "etc" / "os").read_text() == "changed\n"
    assert not (site.cache / "layers").exists()
    for container, bundle in (("a", first), ("b", site.slurm.bundle)):
        assert site.stage_out(container, bundle) == 0, site.slurm.errors


@needs_root
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_containers_own_files_make_its_layers_another_image(tmp_path: Path, name: str) -> None:
    """The same layers under a writable layer of other content are another image: a file
    of the container's own (`podman cp` before `start`), or a directory made anew where the
    image has one (opaque: the image's entries there are hidden), each as the same listing
    of the writable layer would show it with the image's entries there or without."""
    site = Site(tmp_path, name)
    _, upper = on_engine_overlay(site, tmp_path)
    bundles = {}

    def entry_of(container: str) -> Path:
        assert site.stage_in(container) == 0, site.slurm.errors
        bundles[container] = site.slurm.bundle
        return cache_entry(Path(site.slurm.bundle))

    image = entry_of("a")
    (upper / "etc").mkdir()
    (upper / "etc" / "own").write_text("own\n")
    owned = entry_of("b")
    assert owned != image and (owned / "rootfs" / "etc" / "own").read_text() == "own\n"
    (upper / "etc" / "own").unlink()
    (upper / "etc" / "new").touch()  # the image's /etc, and an empty file of the container's
    beside = entry_of("c")
    assert (beside / "rootfs" / "etc" / "os").exists()
    rootfs = site.bundle / "rootfs"
    site.slurm.command(f"rm -rf {rootfs}/etc && mkdir {rootfs}/etc && touch {rootfs}/etc/new")
    instead = entry_of("d")  # the same listing of the writable layer as c's
    assert instead != beside and not (instead / "rootfs" / "etc" / "os").exists()
    for container, bundle in bundles.items():
        assert site.stage_out(container, bundle) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_cached_image_is_copied_once(tmp_path: Path, name: str) -> None:
    """The second container of an image copies nothing of it: both run on one entry, each
    with a writable layer of its own; the entry is marked in use until both ended."""
    site = Site(tmp_path, name)
    (site.bundle / "rootfs").chmod(0o755)
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    entry = cache_entry(first)
    imported = (entry / "stamp").stat().st_mtime_ns
    assert site.stage_in("b") == 0, site.slurm.errors
    second = Path(site.slurm.bundle)
    assert cache_entry(second) == entry and (entry / "stamp").stat().st_mtime_ns == imported
    assert sorted(p.name for p in site.cache.iterdir() if p.is_dir()) == [entry.name]
    assert sorted(p.name for p in (entry / "users").iterdir()) == ["a", "b"]
    assert not (second / "rootfs" / "etc" / "os").exists()  # the lower layer's, in the cache
    site.written(first, "etc/os").write_text("a's\n")
    assert site.stage_out("a", str(first)) == 0, site.slurm.errors
    assert (site.bundle / "rootfs" / "etc" / "os").read_text() == "a's\n"
    assert (entry / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    assert oct((site.bundle / "rootfs").stat().st_mode & 0o777) == "0o755"  # the root's own
    assert site.stage_out("b", str(second)) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.skipif(UID != 0, reason="a whiteout (a 0/0 character device) is made by root here")
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_containers_deletions_come_back(tmp_path: Path, name: str) -> None:
    """The overlay's deletions are applied to the engine's root filesystem: a whiteout (a
    deleted file or directory), an opaque directory (deleted and made again: only what is
    in it now), a top-level file deleted and one created."""
    site = Site(tmp_path, name)
    root = site.bundle / "rootfs"
    (root / "etc" / "gone").write_text("x\n")
    (root / "etc" / "remade").mkdir()
    (root / "etc" / "remade" / "old").write_text("old\n")
    (root / "topfile").write_text("top\n")
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    assert (staged / "rootfs" / "topfile").read_text() == "top\n"
    os.mknod(site.written(staged, "etc/gone"), 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    remade = site.written(staged, "etc/remade")
    remade.mkdir()
    os.setxattr(remade, "user.overlay.opaque", b"y")
    (remade / "new").write_text("new\n")
    (staged / "rootfs" / "topfile").unlink()
    (staged / "rootfs" / "newtop").mkdir()
    (staged / "rootfs" / "newtop" / "f").write_text("f\n")
    assert site.stage_out() == 0, site.slurm.errors
    assert not (root / "etc" / "gone").exists() and not (root / "topfile").exists()
    assert sorted(p.name for p in (root / "etc" / "remade").iterdir()) == ["new"]
    assert (root / "newtop" / "f").read_text() == "f\n"
    assert (root / "etc" / "os").read_text() == "busybox\n"
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_changed_cache_entry_is_not_used(tmp_path: Path, name: str) -> None:
    """An entry changed after its import (by hand, or a broken copy) is set aside and the
    image imported again; once no container uses it, the next import removes it."""
    site = Site(tmp_path, name)
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    entry = cache_entry(first)
    (entry / "rootfs" / "etc" / "os").write_text("tampered\n")
    assert site.stage_in("b") == 0, site.slurm.errors
    second = Path(site.slurm.bundle)
    assert cache_entry(second) == entry
    assert (entry / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    [aside] = site.cache.glob("changed-*")
    assert (aside / "users" / "a").exists()  # still in use by a: not removed under it
    if name == "node-local.lua":  # the node's copy of the changed entry: set aside too
        [node_aside] = site.node_cache.glob("changed-*")
        assert (node_aside / "users" / "a").exists()
        assert (site.node_cache / entry.name / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    for name, bundle in (("a", first), ("b", second)):
        assert site.stage_out(name, str(bundle)) == 0, site.slurm.errors
    (site.bundle / "rootfs" / "etc" / "os").write_text("a new image\n")
    assert site.stage_in("c") == 0, site.slurm.errors  # an import: removes what is unused
    assert not aside.exists()
    assert not list(site.node_cache.glob("changed-*"))  # (node-local.lua: the node's too)
    assert site.stage_out("c") == 0, site.slurm.errors


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_import_killed_half_way_is_never_used(tmp_path: Path, name: str) -> None:
    site = Site(tmp_path, name)
    assert site.stage_in("a") == 0, site.slurm.errors
    entry = cache_entry(Path(site.slurm.bundle))
    assert site.stage_out("a") == 0, site.slurm.errors
    copies = [entry, site.node_cache / entry.name] if name == "node-local.lua" else [entry]
    for copy in copies:  # (node-local.lua: the node's copy too)
        shutil.rmtree(copy)
        (copy.with_name(copy.name + ".tmp") / "rootfs").mkdir(parents=True)  # after a file
    assert site.stage_in("b") == 0, site.slurm.errors
    for copy in copies:
        assert (copy / "rootfs" / "etc" / "os").read_text() == "busybox\n"
        assert not copy.with_name(copy.name + ".tmp").exists()
    assert site.stage_out("b") == 0, site.slurm.errors


@pytest.mark.parametrize("name", SCRIPTS)
def test_first_containers_started_at_once_import_once(tmp_path: Path, name: str) -> None:
    """Six containers of an image not yet cached, staged at once (each scrun has a Lua of
    its own): one import, under the entry's lock; all six run on it."""
    site = Site(tmp_path, name)
    (site.bundle / "rootfs" / "big").write_bytes(os.urandom(8 * 1024 * 1024))
    loaded = [site.load() for _ in range(6)]
    config = str(site.bundle / "config.json")

    def stage_in(index: int) -> tuple[int, str, list[str]]:
        runtime, slurm = loaded[index]
        hook = runtime.globals().slurm_scrun_stage_in
        rc = int(
            hook(f"c{index}", str(site.bundle), "/spool", config, 7, UID, UID, runtime.table())
        )
        return rc, slurm.bundle, slurm.errors

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(stage_in, range(6)))
    assert [(rc, errors) for rc, _, errors in results] == [(0, [])] * 6
    [entry] = {cache_entry(Path(bundle)) for _, bundle, _ in results}
    caches = [site.cache, site.node_cache] if name == "node-local.lua" else [site.cache]
    for cache in caches:  # (node-local.lua: on the node too, one copy, under its own lock)
        assert sorted(p.name for p in cache.iterdir()) == [entry.name, f"{entry.name}.lock"]
    for index, (_, bundle, _) in enumerate(results):
        assert site.stage_out(f"c{index}", bundle) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_cache_keeps_to_its_limit(tmp_path: Path, name: str) -> None:
    """Past the site's limit an import removes the least recently used images that no
    container uses, never one in use."""
    site = Site(tmp_path, name, cache_mib=3)
    big = site.bundle / "rootfs" / "big"
    entries = []
    for image in ("a", "b", "c"):
        big.write_bytes(os.urandom(2 * 1024 * 1024))
        assert site.stage_in(image) == 0, site.slurm.errors
        entries.append(cache_entry(Path(site.slurm.bundle)))
        if image == "a":
            assert site.stage_out(image) == 0, site.slurm.errors  # a: ended, unused
            used_a = Path(site.slurm.bundle)
    assert not entries[0].exists()  # b's import removed it
    assert entries[1].exists() and entries[2].exists()  # in use by b and c: kept
    assert not used_a.exists()
    if name == "node-local.lua":  # the node's cache keeps to the limit too
        kept = sorted(p.name for p in site.node_cache.iterdir() if p.is_dir())
        assert kept == sorted(entry.name for entry in entries[1:])


def test_a_node_copies_a_cached_image_once(tmp_path: Path) -> None:
    """node-local.lua: a node copies an image from the scratch's cache to its own once;
    the containers of it on that node mark it in use until each ends, and each run on it
    (its overlays' lower layers) with a writable layer of its own."""
    site = Site(tmp_path, "node-local.lua")
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    [copy] = [p for p in site.node_cache.iterdir() if p.is_dir()]
    assert copy.name == cache_entry(first).name
    assert (copy / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    copied = (copy / "rootfs" / "etc" / "os").stat().st_ino
    assert site.stage_in("b") == 0, site.slurm.errors
    second = Path(site.slurm.bundle)
    assert [p for p in site.node_cache.iterdir() if p.is_dir()] == [copy]
    assert (copy / "rootfs" / "etc" / "os").stat().st_ino == copied
    assert sorted(p.name for p in (copy / "users").iterdir()) == ["a", "b"]
    for bundle in (first, second):
        [overlay] = json.loads((bundle / "config.json").read_text())["mounts"][:1]
        assert overlay["options"][:2] == [
            f"lowerdir={copy}/rootfs/etc",
            f"upperdir={bundle}/upper/etc",
        ]
        assert (bundle / "work" / "etc").is_dir()
    assert site.stage_out("a", str(first)) == 0, site.slurm.errors
    assert sorted(p.name for p in (copy / "users").iterdir()) == ["b"]
    assert site.stage_out("b", str(second)) == 0, site.slurm.errors
    assert list((copy / "users").iterdir()) == [] and not first.exists()
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_read_only_root_has_read_only_overlays(tmp_path: Path, name: str) -> None:
    """`podman run --read-only` (root.readonly): crun makes the root read-only, not the
    mounts on it, so a cached image's overlays are mounted read-only themselves (they were
    writable: `touch /etc/x` succeeded where crun's says "Read-only file system")."""
    site = Site(tmp_path, name)
    config = json.loads((site.bundle / "config.json").read_text())
    config["root"]["readonly"] = True
    (site.bundle / "config.json").write_text(json.dumps(config))
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    written = json.loads((staged / "config.json").read_text())
    assert written["root"]["readonly"] is True
    [overlay] = [mount for mount in written["mounts"] if mount.get("type") == "overlay"]
    assert overlay["destination"] == "/etc"
    assert overlay["options"][-3:] == ["userxattr", "volatile", "ro"]
    assert site.stage_out() == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_cached_images_mount_points_have_its_modes(tmp_path: Path, name: str) -> None:
    """The staged root's mount points for the image's top-level directories have the
    image's modes, as their writable layers do: crun's tmpcopyup gives a tmpfs the engine
    mounts there (podman's /tmp of a --read-only container) the mode beneath it, and a
    rootless user could not write a /tmp of mkdir's 755."""
    site = Site(tmp_path, name)
    (site.bundle / "rootfs" / "tmp").mkdir()
    (site.bundle / "rootfs" / "tmp").chmod(0o1777)
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    for layer in ("rootfs", "upper"):
        assert oct((staged / layer / "tmp").stat().st_mode & 0o7777) == "0o1777", layer
    assert site.stage_out() == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_without_the_cache_a_container_is_copied_whole(tmp_path: Path, name: str) -> None:
    """`image_cache = false`: the root filesystem is copied whole (no overlay, no cache on
    the scratch or the node), and what the container wrote there comes back."""
    site = Site(tmp_path, name, cache=False)
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    mounts = json.loads((staged / "config.json").read_text())["mounts"]
    assert [m for m in mounts if m.get("type") == "overlay"] == []
    assert (staged / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    # (another size: rsync's quick check takes a file of the same size and second as unchanged)
    (staged / "rootfs" / "etc" / "os").write_text("changed on the node\n")
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.bundle / "rootfs" / "etc" / "os").read_text() == "changed on the node\n"
    assert not site.cache.exists() and not site.node_cache.exists()
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_container_of_two_nodes_has_a_writable_layer_on_each(tmp_path: Path, name: str) -> None:
    """A writable layer serves one overlay mount: a container on two nodes of the shared
    scratch, whose nodes would mount the same one, is copied whole there (one node's task
    failed, 126); node-local.lua's layers are on each node's own disk, and it keeps them."""
    site = Site(tmp_path, name)
    env = ("SLURM_JOB_ID=7", "SLURM_JOB_NUM_NODES=2", "SLURM_JOB_NODELIST=n[1-2]")
    assert site.stage_in(job_env=env) == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    mounts = json.loads((staged / "config.json").read_text())["mounts"]
    overlays = [m["destination"] for m in mounts if m.get("type") == "overlay"]
    if name == "node-local.lua":
        assert overlays == ["/etc"]
    else:
        assert overlays == [] and not site.cache.exists()
        assert (staged / "rootfs" / "etc" / "os").read_text() == "busybox\n"
        (staged / "rootfs" / "etc" / "os").write_text("changed on a node\n")
    assert site.stage_out() == 0, site.slurm.errors
    if name == "shared-scratch.lua":
        assert (site.bundle / "rootfs" / "etc" / "os").read_text() == "changed on a node\n"
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_what_the_container_left_alone_is_not_copied_back(tmp_path: Path, name: str) -> None:
    """A container that wrote nothing in its root and bind mounts: stage-out compares
    nothing and copies nothing back (a file put in podman's copy meanwhile, which a copy
    back of the whole tree with --delete would remove, stays; so does the bind mount's own
    newer content)."""
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    (site.bundle / "rootfs" / "copied-in").write_text("podman cp\n")
    (site.data / "old").write_text("newer, by someone else\n")
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.bundle / "rootfs" / "copied-in").read_text() == "podman cp\n"
    assert (site.data / "old").read_text() == "newer, by someone else\n"
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_deletion_alone_goes_back(tmp_path: Path, name: str) -> None:
    """A container that only deletes, at the top of a bind mount and in its root
    filesystem: the deletions are what changed, and they go back."""
    site = Site(tmp_path, name)
    (site.bundle / "rootfs" / "gone").write_text("x\n")
    assert site.stage_in() == 0, site.slurm.errors
    staged = Path(site.slurm.bundle)
    (staged / "mounts" / "5" / "old").unlink()
    (staged / "rootfs" / "gone").unlink()
    assert site.stage_out() == 0, site.slurm.errors
    assert not (site.data / "old").exists()
    assert not (site.bundle / "rootfs" / "gone").exists()
    assert (site.data / "sub").is_dir()


def on_path(site: Site, tmp: Path, name: str, script: str) -> str:
    """Put a program `name` of `script`'s making first on the script's PATH; returns the
    PATH before."""
    directory = tmp / f"fake-{name}"
    directory.mkdir()
    (directory / name).write_text(script)
    (directory / name).chmod(0o755)
    path, site.slurm.path = site.slurm.path, f"{directory}:{site.slurm.path}"
    return path


# rm killed half way through removing a staged copy, with the command that ran it: what it
# has removed by then is the bind mount's `old`, the rest is there
RM_KILLED_HALF_WAY = """#!/bin/sh
for last; do :; done
if [ -f "$last/mounts/5/old" ]; then /bin/rm -f -- "$last/mounts/5/old"; kill -9 $PPID $$; fi
exec /bin/rm "$@"
"""


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_removal_cut_short_is_never_taken_for_deletions(tmp_path: Path, name: str) -> None:
    """Stage-out's last step, removing the staged copy, killed half way (its anchor was
    killed), and stage-out run again (`scrun delete` does): it must not take what the
    removal took for the container's deletions. The copy is renamed before it is removed;
    a stage-out that finds none has nothing to do but finish the removal."""
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    (Path(site.slurm.bundle) / "mounts" / "5" / "new").write_text("new\n")
    path = on_path(site, tmp_path, "rm", RM_KILLED_HALF_WAY)
    assert site.stage_out() != 0
    site.slurm.path = path
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.data / "old").read_text() == "old\n"
    assert (site.data / "new").read_text() == "new\n"
    assert site.leftovers() == site.users_dirs
    assert not list(site.node.rglob("*.removing"))


# rm as a user without root's powers over the files (scrun run by hand, or a node without
# `unshare --map-auto`) runs it: a directory its owner may not read, or may not write and
# that holds something, cannot be emptied
RM_OF_A_USER = """#!/bin/sh
for last; do :; done
closed=$(/usr/bin/find "$last" -type d \\( ! -perm -u=rx -o ! -perm -u=w ! -empty \\) -print -quit)
if [ -n "$closed" ]; then
    echo "rm: cannot remove '$last': Permission denied" >&2; exit 1
fi
exec /bin/rm "$@"
"""


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_volatile_overlays_work_directory_is_removed(tmp_path: Path, name: str) -> None:
    """A volatile overlay leaves work/<dir>/work/incompat/volatile in its work directory,
    whose `work` the kernel makes with mode 000: the owner's `rm -r` cannot empty it
    (stage-out then failed and left the copy), so the removal makes it enterable first."""
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    work = Path(site.slurm.bundle) / "work" / "etc" / "work"
    (work / "incompat" / "volatile").mkdir(parents=True)
    work.chmod(0)
    on_path(site, tmp_path, "rm", RM_OF_A_USER)
    assert site.stage_out() == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs
    assert not list(site.node.rglob("*.removing"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_bind_mounts_read_only_directory_is_carried_and_removed(
    tmp_path: Path, name: str
) -> None:
    """A user's read-only directory with files in a carried bind mount: all goes back, and
    the carried copy is removed (the owner's `rm -r` alone cannot: stage-out then failed)."""
    site = Site(tmp_path, name)
    closed = site.data / "closed"
    closed.mkdir()
    (closed / "kept").write_text("kept\n")
    closed.chmod(0o555)
    on_path(site, tmp_path, "rm", RM_OF_A_USER)
    assert site.stage_in() == 0, site.slurm.errors
    (Path(site.slurm.bundle) / "mounts" / "5" / "new").write_text("new\n")
    assert site.stage_out() == 0, site.slurm.errors
    assert (site.data / "new").read_text() == "new\n"
    assert (closed / "kept").read_text() == "kept\n"
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_images_read_only_directory_leaves_nothing_in_the_cache(
    tmp_path: Path, name: str
) -> None:
    """An image with a read-only directory that holds files (Fedora's 0550 /root), cached
    by a user without root's powers over its files: an import of it killed half way is
    removed and the image imported again, and past the limit its entry is evicted. The
    owner's `rm -r` alone can do neither: the image then failed to stage for good, or the
    cache outgrew its limit."""
    site = Site(tmp_path, name, cache_mib=3)
    closed = site.bundle / "rootfs" / "root"
    closed.mkdir()
    (closed / "profile").write_text("profile\n")
    closed.chmod(0o550)
    big = site.bundle / "rootfs" / "big"
    big.write_bytes(os.urandom(2 * 1024 * 1024))
    on_path(site, tmp_path, "rm", RM_OF_A_USER)
    assert site.stage_in("a") == 0, site.slurm.errors
    entry = cache_entry(Path(site.slurm.bundle))
    assert site.stage_out("a") == 0, site.slurm.errors
    half_way = entry.with_name(entry.name + ".tmp")
    entry.rename(half_way)  # an import killed after it copied /root
    assert site.stage_in("b") == 0, site.slurm.errors
    assert cache_entry(Path(site.slurm.bundle)) == entry and not half_way.exists()
    assert (entry / "rootfs" / "root" / "profile").read_text() == "profile\n"
    assert site.stage_out("b") == 0, site.slurm.errors
    big.write_bytes(os.urandom(2 * 1024 * 1024))  # another image: past the limit
    assert site.stage_in("c") == 0, site.slurm.errors
    assert not entry.exists()
    if name == "node-local.lua":  # the node's copy too
        assert not (site.node_cache / entry.name).exists()
    assert site.stage_out("c") == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_copy_stage_out_cannot_list_whole_deletes_nothing(tmp_path: Path, name: str) -> None:
    """find fails on a bind mount's copy (a directory in it the user cannot read): the
    copy back fails in one line and deletes nothing at the source, where a short list of
    what is there would have been taken for deletions."""
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    (Path(site.slurm.bundle) / "mounts" / "5" / "new").write_text("new\n")
    on_path(site, tmp_path, "find", """#!/bin/sh
case " $* " in *" -mindepth 1 "*) echo "find: 'x': Permission denied" >&2; exit 1 ;; esac
exec /usr/bin/find "$@"
""")  # fmt: skip
    assert site.stage_out() != 0
    assert (site.data / "old").read_text() == "old\n"
    assert (site.data / "sub").is_dir()
    assert any("Permission denied" in error for error in site.slurm.errors), site.slurm.errors


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_users_the_engine_writes_in_are_each_containers_own(tmp_path: Path, name: str) -> None:
    """podman writes the user into /etc/passwd and /etc/group for each container (keep-id,
    --user): they do not make the image another one, and each container gets its own."""
    site = Site(tmp_path, name)
    passwd = site.bundle / "rootfs" / "etc" / "passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\n")
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    passwd.write_text("root:x:0:0::/root:/bin/sh\nme:x:1001:1001::/home/me:/bin/sh\n")
    assert site.stage_in("b") == 0, site.slurm.errors
    second = Path(site.slurm.bundle)
    assert cache_entry(first) == cache_entry(second)
    assert (first / "upper" / "etc" / "passwd").read_text().count("\n") == 1
    assert "me:x:1001" in (second / "upper" / "etc" / "passwd").read_text()
    for name, bundle in (("a", first), ("b", second)):
        assert site.stage_out(name, str(bundle)) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.fixture
def mount_tmpfs() -> Iterator[Callable[[Path, str], None]]:
    """Mounts a tmpfs with options (root only), each unmounted at the test's end."""
    if UID != 0:
        pytest.skip("mounting a filesystem needs root")
    mounted: list[Path] = []

    def mount(path: Path, options: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
        mounted.append(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=True)


def assert_nothing_left(site: Site) -> None:
    """Nothing of the container anywhere: no staged copy, no import half done, no mark."""
    assert site.leftovers() == site.users_dirs
    for cache in (site.cache, site.node_cache):
        assert not list(cache.glob("*.tmp")) if cache.is_dir() else True


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_cache_that_cannot_be_written_is_one_line(
    tmp_path: Path, name: str, request: pytest.FixtureRequest
) -> None:
    """The user's cache directory cannot be written (read-only, or its mode): one line
    naming it and why, nothing staged."""
    site = Site(tmp_path, name)
    site.cache.mkdir(parents=True, mode=0o700)
    site.cache.parent.chmod(0o700)
    if UID == 0:  # (root writes whatever the mode: a read-only filesystem)
        request.getfixturevalue("mount_tmpfs")(site.cache, "ro,mode=700")
        reason = "Read-only file system"
    else:
        site.cache.chmod(0o500)
        reason = "Permission denied"
    assert site.stage_in() != 0
    assert site.slurm.errors == [
        f"staging into {site.carried} failed (exit 1): "
        f"the image cache {site.cache} cannot be written: {reason}\n"
    ]
    assert site.stage_out() == 0, site.slurm.errors
    assert_nothing_left(site)
    assert list(site.cache.iterdir()) == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_read_only_scratch_is_one_line(
    tmp_path: Path, name: str, mount_tmpfs: Callable[[Path, str], None]
) -> None:
    site = Site(tmp_path, name)
    mount_tmpfs(site.scratch, "ro,mode=1777")
    assert site.stage_in() != 0
    mine = site.scratch / str(UID)
    assert site.slurm.errors == [
        f"staging into {site.carried} failed (exit 1): cannot make {mine}: Read-only file system\n"
    ]
    assert site.stage_out() == 0, site.slurm.errors
    assert list(site.scratch.iterdir()) == []


def fake_scontrol(site: Site, tmp_path: Path, releases: dict[str, str]) -> None:
    """The job runs on the nodes `releases` names (node: kernel release), as `scontrol -o
    show node` tells them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    records = "".join(
        f"NodeName={node} Arch=x86_64 CoresPerSocket=1 OS=Linux {release} #1 SMP "
        f"PREEMPT_DYNAMIC Debian RealMemory=1000 State=ALLOCATED\n"
        for node, release in releases.items()
    )
    scontrol = bin_dir / "scontrol"
    calls = tmp_path / "scontrol-calls"
    scontrol.write_text(
        f'#!/bin/sh\necho "$*" >>{calls}\n'
        f"[ \"$*\" = '-o show node n[1-2]' ] || exit 1\nprintf '%s' '{records}'\n"
    )
    scontrol.chmod(0o755)
    site.slurm.path = f"{bin_dir}:{site.slurm.path}"
    site.slurm.env["SLURM_JOB_NODELIST"] = "n[1-2]"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_node_whose_kernel_cannot_overlay_is_named(tmp_path: Path, name: str) -> None:
    """A node of the job runs a kernel older than 5.11 (no overlay in a user namespace):
    one line naming the node and what it lacks, before anything is imported."""
    site = Site(tmp_path, name)
    fake_scontrol(site, tmp_path, {"n1": "6.1.0-28-amd64", "n2": "5.10.0-33-amd64"})
    assert site.stage_in() != 0
    assert site.slurm.errors == [
        f"staging into {site.carried} failed (exit 1): node n2 cannot run cached images: its "
        "kernel, Linux 5.10.0-33-amd64, cannot make an overlay in a user namespace "
        "(Linux 5.11 or later can; or set image_cache = false)\n"
    ]
    assert site.stage_out() == 0, site.slurm.errors
    assert_nothing_left(site)
    assert [p.name for p in site.cache.iterdir()] == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_nodes_whose_kernels_overlay_run_cached_images(tmp_path: Path, name: str) -> None:
    """...and the nodes that passed are not asked about again: a later container of them
    costs slurmctld no request (a failed check is not remembered: test above)."""
    site = Site(tmp_path, name)
    fake_scontrol(site, tmp_path, {"n1": "5.11.0", "n2": "6.12.48+deb13-amd64"})
    for _ in range(2):
        assert site.stage_in() == 0, site.slurm.errors
        assert (Path(site.slurm.bundle) / "upper" / "etc").is_dir()
        assert site.stage_out() == 0, site.slurm.errors
    assert (tmp_path / "scontrol-calls").read_text() == "-o show node n[1-2]\n"


@pytest.mark.parametrize(
    ("name", "full"),
    [("shared-scratch.lua", "scratch"), ("node-local.lua", "scratch"), ("node-local.lua", "node")],
)
def test_a_full_disk_is_one_line(
    tmp_path: Path, name: str, full: str, mount_tmpfs: Callable[[Path, str], None]
) -> None:
    """The scratch (or, for node-local.lua, a node's local disk) fills up while the image is
    copied there: one line saying which is full, and the half copy removed with the rest of
    what was staged."""
    site = Site(tmp_path, name)
    mount_tmpfs(site.scratch if full == "scratch" else site.node, "size=1m,mode=1777")
    (site.bundle / "rootfs" / "big").write_bytes(os.urandom(2 * 1024 * 1024))
    assert site.stage_in() != 0
    failed = (
        f"staging into {site.carried} failed: the scratch {site.scratch}"
        if full == "scratch"
        else f"copying the container on the nodes failed: {site.node} on a node"
    )
    assert site.slurm.errors == [f"{failed} is full (what it had copied there is removed)"]
    assert site.stage_out() == 0, site.slurm.errors
    assert_nothing_left(site)
    # the copy that failed left nothing (a node's: the scratch keeps the image, unused)
    cache = site.cache if full == "scratch" else site.node_cache
    assert [p.name for p in cache.glob("*") if not p.name.endswith(".lock")] == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_long_import_says_so(tmp_path: Path, name: str) -> None:
    """An import that runs past import_notice_seconds (0 here: at once) says so, with the
    image's size; a container of an image already cached says nothing."""
    site = Site(tmp_path, name, notice_s=0)
    (site.bundle / "rootfs" / "big").write_bytes(os.urandom(2 * 1024 * 1024))
    assert site.stage_in("a") == 0, site.slurm.errors
    first = site.slurm.bundle
    said = ["scrun: importing image (3 MiB) to the cache"]
    if name == "node-local.lua":  # and the node's copy of it, from the scratch's cache
        said.append("scrun: copying image (3 MiB) to node n1")
    assert site.slurm.notices == said
    site.slurm.notices.clear()
    assert site.stage_in("b") == 0, site.slurm.errors
    assert site.slurm.notices == []
    for container, bundle in (("a", first), ("b", site.slurm.bundle)):
        assert site.stage_out(container, bundle) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_notice_that_never_came_leaves_no_process(tmp_path: Path, name: str) -> None:
    """An import quicker than import_notice_seconds ends its notice's timer: the timer's
    processes are ended and waited for, none is left to the anchor (a zombie there for the
    container's life, the anchor being the init of its pid namespace)."""
    site = Site(tmp_path, name, notice_s=30)
    site.slurm.orphans = tmp_path / "orphans"
    site.slurm.orphans.touch()
    assert site.stage_in() == 0, site.slurm.errors
    assert site.stage_out() == 0, site.slurm.errors
    assert site.slurm.orphans.read_text() == ""
    assert site.slurm.notices == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_quick_import_says_nothing(tmp_path: Path, name: str) -> None:
    site = Site(tmp_path, name)
    assert site.stage_in() == 0, site.slurm.errors
    assert site.slurm.notices == []
    assert site.stage_out() == 0, site.slurm.errors


@pytest.mark.parametrize(
    ("name", "lock", "said"),
    [
        ("shared-scratch.lua", "cache", "waiting for another container's import of this image"),
        ("node-local.lua", "cache", "waiting for another container's import of this image"),
        (
            "node-local.lua",
            "node_cache",
            "waiting for another container's copy of this image to node n1",
        ),
    ],
)
def test_a_container_waiting_for_anothers_import_says_so(
    tmp_path: Path, name: str, lock: str, said: str
) -> None:
    """Another container holds the image's lock (it imports the image, or copies it to the
    node): past import_notice_seconds (0 here) the waiting container says so, then goes on
    once the lock is free (released here when it has said so)."""
    site = Site(tmp_path, name, notice_s=0)
    assert site.stage_in("a") == 0, site.slurm.errors
    key = cache_entry(Path(site.slurm.bundle)).name
    assert site.stage_out("a") == 0, site.slurm.errors
    site.slurm.notices.clear()
    with open(getattr(site, lock) / f"{key}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        release = threading.Timer(10, held.close)  # (should it never say so)
        release.start()
        site.slurm.on_notice = lambda line: held.close()
        try:
            assert site.stage_in("b") == 0, site.slurm.errors
        finally:
            release.cancel()
    assert site.slurm.notices == [f"scrun: {said}"]
    assert site.stage_out("b") == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_container_whose_lock_is_free_says_nothing(tmp_path: Path, name: str) -> None:
    """The lock is held only briefly (well within the site's 3 s): nothing is said."""
    site = Site(tmp_path, name)
    assert site.stage_in("a") == 0, site.slurm.errors
    key = cache_entry(Path(site.slurm.bundle)).name
    assert site.stage_out("a") == 0, site.slurm.errors
    caches = (site.cache, site.node_cache) if name == "node-local.lua" else (site.cache,)
    for cache in caches:
        with open(cache / f"{key}.lock", "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            threading.Timer(0.2, held.close).start()
            assert site.stage_in("b") == 0, site.slurm.errors
        assert site.stage_out("b") == 0, site.slurm.errors
    assert site.slurm.notices == []


def test_a_changed_node_copy_is_not_used(tmp_path: Path) -> None:
    """node-local.lua: a node's copy of an image keeps its own stamp (its files' status
    change times, taken when it was copied); one changed after its copy is set aside, said
    so, and the image copied to the node again; the containers of the changed copy keep it
    until they end."""
    site = Site(tmp_path, "node-local.lua")
    assert site.stage_in("a") == 0, site.slurm.errors
    first = Path(site.slurm.bundle)
    key = cache_entry(first).name
    copy = site.node_cache / key
    assert (copy / "node-stamp").read_text().strip() != (copy / "stamp").read_text().strip()
    (copy / "rootfs" / "etc" / "os").write_text("tampered\n")
    assert site.stage_in("b") == 0, site.slurm.errors
    assert site.slurm.notices == [
        "scrun: the copy of the cached image on node n1 changed after it was made: copying it again"
    ]
    assert (copy / "rootfs" / "etc" / "os").read_text() == "busybox\n"
    [aside] = site.node_cache.glob("changed-*")
    assert (aside / "users" / "a").exists() and not (copy / "users" / "a").exists()
    for container, bundle in (("a", first), ("b", Path(site.slurm.bundle))):
        assert site.stage_out(container, str(bundle)) == 0, site.slurm.errors
    assert site.leftovers() == site.users_dirs


# The functions (and shell commands) node-local.lua has from shared-scratch.lua (each script
# stands alone)
COPIED_FUNCTIONS = [
    "carry_one_command",
    "carry_in_command",
    "mapped_root",
    "hand_over_command",
    "shm_mount",
    "shm_size_command",
    "shm_tmpfs",
    "small_file_content",
    "refresh_copy",
    "refresh_carried_files",
    "remove_command",
    "evict_command",
    "notice_command",
    "key_command",
]


@pytest.mark.parametrize("function", COPIED_FUNCTIONS)
def test_a_function_both_scripts_have_is_the_same_in_both(function: str) -> None:
    """A fix to one copy must reach the other."""

    def text(script: str) -> str:
        source = (DOCS / script).read_text()
        found = re.search(
            rf"^local function {function}\(.*?^end$|^local {function} = .*?^\]\]$",
            source,
            re.M | re.S,
        )
        assert found, f"{script} has no {function}"
        return found.group(0)

    assert text("shared-scratch.lua") == text("node-local.lua")
