"""The container's program is found in the container's PATH inside its rootfs, as runc and
crun find it, whatever the compute node has at the same paths.

The image has alpine's layout: PATH=/usr/bin:/bin, busybox and its applets in /bin, a few
links in /usr/bin. The host has /usr/bin/sh, /usr/bin/cat, /usr/bin/ls: a lookup on the node
(what slurmstepd does with a relative argv[0]) or one that follows a link out to the host
picks those. scrun passes srun the absolute path, so the process's argv[0] shows it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Cluster, SiteRuntime

SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
PROG = '#!/bin/sh\necho "$0 in $PWD"\n'


def alpine_like_bundle(cluster: Cluster, directory: Path, args: list[str]) -> Path:
    rootfs = directory / "rootfs"
    for sub in ("bin", "usr/bin", "work", "proc", "dev", "sys", "tmp", "etc"):
        (rootfs / sub).mkdir(parents=True)
    shutil.copy2(Path(cluster.bundle) / "rootfs" / "bin" / "busybox", rootfs / "bin" / "busybox")
    for applet in ("sh", "cat", "ls", "echo"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "usr" / "bin" / "env").symlink_to("/bin/busybox")  # as alpine has it
    (rootfs / "usr" / "bin" / "ls").symlink_to("/usr/bin/python3")  # the host's, not here
    (rootfs / "work" / "prog").write_text(PROG)
    (rootfs / "work" / "prog").chmod(0o755)
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["process"].update(args=args, cwd="/work", env=["PATH=/usr/bin:/bin"], terminal=False)
    config["root"] = {"path": "rootfs", "readonly": True}
    (directory / "config.json").write_text(json.dumps(config))
    for path in (directory.parent, directory):
        path.chmod(0o755)
    return directory


CASES = {
    # argv[0] is what srun was given: the path inside the image.
    "sh": (["sh", "-c", 'echo "$0"'], "/bin/sh\n"),
    "cat": (["cat", "/proc/self/cmdline"], "/bin/cat\0/proc/self/cmdline\0"),
    # relative to process.cwd (24.11 looked for it in the node's cwd)
    "cwd": (["./prog"], "/work/prog in /work\n"),
    # /usr/bin/ls links to a program only the host has: /bin/ls is the image's
    "link-out": (["ls", "/work"], "prog\n"),
    # the link is run, not its target: busybox picks the applet by argv[0]'s name
    "applet-link": (["env"], "PATH=/usr/bin:/bin"),
}


@pytest.mark.parametrize("case", CASES)
def test_program_is_looked_up_inside_the_image(
    cluster: Cluster, tmp_path: Path, no_leftovers: Callable[..., None], case: str
) -> None:
    args, expected = CASES[case]
    bundle = alpine_like_bundle(cluster, tmp_path / "bundle", args)
    root = tmp_path / "root"
    done = cluster.run(
        [SCRUN, "--root", str(root), "run", "--bundle", str(bundle), f"lookup-{case}"],
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout, done
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []  # caches aside


def test_program_is_looked_up_in_the_staged_rootfs(
    site_runtime: Callable[[str | None], SiteRuntime],
    seed_script: str,
    cluster: Cluster,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """With the man page's scrun.lua, the nodes run the rsynced copy of the bundle."""
    site = site_runtime(seed_script)
    bundle = alpine_like_bundle(cluster, tmp_path / "bundle", ["./prog"])
    container_id = f"lookup-staged-{uuid.uuid4().hex[:8]}"
    done = site.scrun(
        "--root",
        str(tmp_path / "root"),
        "run",
        "--bundle",
        str(bundle),
        container_id,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "/work/prog in /work\n", done
