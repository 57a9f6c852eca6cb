"""The shipped scrun.lua scripts (docs/scrun-lua) with the file modes real images carry and
the busybox test image lacks: a non-empty read-only directory (Fedora's /root is 0550, with
files), a 0555 one holding a 0500 one, files of mode 0000 (/etc/shadow, /etc/gshadow),
setuid and setgid files, hard links, a link to an absolute path and a FIFO (an image's
layers are tar files, which hold no socket). A test user's rootless containers (default and
--userns=keep-id) through each layout's image cache: the container sees the image's modes
and writes into its writable layer, podman sees its changes, the cache's entries are evicted
past its size limit and pruned (`scrun-stage cache prune`, with --nodes for node-local.lua's
copies), and nothing staged stays; and node-local.lua's copy of the whole root filesystem.
A user cannot, as itself, read its own file of mode 0000 nor remove its own read-only
directory with files in it: scrun runs scrun.lua's commands on the login host in podman's
user namespace, where it can, but a node's step and `scrun-stage` run as the user.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import node_roots, with_private_staging
from helpers import copy_out
from users import IMAGE as BUSYBOX
from users import User, assert_users_clean, pick_users, user_site

if TYPE_CHECKING:
    from conftest import Cluster, SiteRuntime

REPO = Path(__file__).resolve().parents[2]
SCRUN_STAGE = REPO / ".venv" / "bin" / "scrun-stage"
IMAGE = "localhost/scrun-modes"
MakeSite = Callable[[str | None], "SiteRuntime"]
Runner = Callable[..., subprocess.CompletedProcess[str]]

# What the image adds to harness/mkrootfs.sh's busybox rootfs (run in it as root).
ADD_MODES = """\
printf 'root:*:1::::::\\n' >etc/shadow && printf 'root:*::\\n' >etc/gshadow
chmod 0000 etc/shadow etc/gshadow
echo secret >root/secret && chmod 0400 root/secret && chmod 0550 root
mkdir -p opt/ro/sub && echo f >opt/ro/sub/f && chmod 0444 opt/ro/sub/f
chmod 0500 opt/ro/sub && chmod 0555 opt/ro
printf '#!/bin/sh\\nid -u\\n' >opt/suid && chmod 4755 opt/suid
echo g >opt/sgid && chmod 2755 opt/sgid
echo linked >opt/hard1 && chmod 0644 opt/hard1 && ln opt/hard1 opt/hard2
ln -s /etc/shadow opt/abs
mkfifo -m 0640 opt/fifo
"""

# What the container prints of the image's files (modes, hard links, link, type) and what
# the image holds.
LOOK = (
    "echo $(stat -c %a /root /root/secret /opt/ro /opt/ro/sub /opt/ro/sub/f /etc/shadow"
    " /etc/gshadow /opt/suid /opt/sgid /opt/hard1 /opt/fifo) $(stat -c %h /opt/hard2)"
    " $(readlink /opt/abs) $(stat -c %F /opt/fifo)"
)
SEEN = "550 400 555 500 444 0 0 4755 2755 644 640 2 /etc/shadow fifo"
# the default mode's root writes into the read-only directories and to a 0000 file,
# changes a directory's mode and deletes a file
WRITE_AS_ROOT = (
    "echo new >/opt/ro/sub/new && echo r >/root/new && echo x >>/etc/shadow"
    " && chmod 0700 /opt/ro && rm /root/secret"
)
ROOT_CHANGES = {"A /opt/ro/sub/new", "A /root/new", "C /etc/shadow", "C /opt/ro", "D /root/secret"}
# keep-id's user owns no file of the image on the login host: it writes to /tmp
WRITE_AS_USER = "echo new >/tmp/new"
USER_CHANGES = {"A /tmp/new"}


@pytest.fixture(scope="session")
def modes_image(cluster: Cluster) -> Iterator[User]:
    """The first test user, with IMAGE (busybox with ADD_MODES) imported, once a session."""
    person = pick_users(cluster.exports, cluster.slurm_conf)[0]
    tarball = Path(f"/var/tmp/scrun-modes-{uuid.uuid4().hex[:10]}.tar")
    build = (
        f'r=$(mktemp -d) && {REPO}/harness/mkrootfs.sh "$r" && (cd "$r" && {ADD_MODES})'
        f' && tar --numeric-owner -C "$r" -cf {tarball} . && chmod 0644 {tarball};'
        ' s=$?; rm -rf "$r"; exit $s'
    )
    built = subprocess.run(["/bin/sh", "-c", build], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    try:
        done = person.podman("import", "--quiet", "--change", "ENV PATH=/bin", str(tarball), IMAGE)
        assert done.returncode == 0, done.stderr
        yield person
    finally:
        tarball.unlink()
        person.podman("rmi", "-f", IMAGE)


def cache_entries(cluster: Cluster, staging: tuple[Path, str], uid: int) -> list[str]:
    """`WHERE:NAME` of each entry (and import under way) in `uid`'s cache on the scratch and
    in node-local.lua's on each node."""
    scratch, node_local = staging
    places = {"scratch": scratch / str(uid) / "scrun-cache"}
    for node, root in node_roots(cluster.env).items():
        places[node] = root / node_local.lstrip("/") / f"scrun-{uid}" / "cache"
    return sorted(
        f"{where}:{path.name}"
        for where, cache in places.items()
        for path in cache.glob("*")
        if path.suffix != ".lock" and not path.name.startswith(".")  # the kernel check's
    )


def run_one(podman: Runner, options: list[str], keep_id: bool) -> None:
    """A container of IMAGE: it sees the image's modes and writes into its root (root: the
    read-only directories and a 0000 file; keep-id's user: /tmp); `podman diff` and `podman
    cp` see its writes afterwards, and the owners of what it did not write are as before."""
    write, changes = (WRITE_AS_USER, USER_CHANGES) if keep_id else (WRITE_AS_ROOT, ROOT_CHANGES)
    name = f"scrun-modes-{uuid.uuid4().hex[:10]}"
    try:
        done = podman("run", "--name", name, *options, IMAGE, "sh", "-c", f"{LOOK} && {write}")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == SEEN, done.stdout
        diff = podman("diff", name)
        assert diff.returncode == 0, diff.stderr
        assert changes <= set(diff.stdout.splitlines()), diff.stdout
        if keep_id:  # its directories stay its root's: a subordinate id, 1 in `podman unshare`
            look = 'cd "$(podman mount "$1")" && stat -c %u:%g bin etc tmp'
            owners = podman("unshare", "sh", "-c", look, "sh", name)
            assert owners.stdout.split() == ["1:1"] * 3, owners
        copied = copy_out(podman, name, "/tmp/new" if keep_id else "/opt/ro/sub/new", "-")
        assert (copied.returncode, "new\n" in copied.stdout) == (0, True), copied
    finally:
        podman("rm", "-f", name)


def users_podman(person: User, site: SiteRuntime) -> Runner:
    """`person`'s podman with `site`'s scrun."""
    env = user_site(person, site)

    def podman(*args: str) -> subprocess.CompletedProcess[str]:
        return person.podman(*args, env=env)

    return podman


def with_setting(text: str, line: str, value: str) -> str:
    assert text.count(line + "\n") == 1, line
    return text.replace(line + "\n", value + "\n")


@pytest.mark.parametrize(
    ("mode", "script"),
    [("default", "shared-scratch"), ("default", "node-local"), ("keep-id", "node-local")],
)
def test_a_cached_images_modes_run_stage_out_and_are_evicted_and_pruned(
    mode: str,
    script: str,
    modes_image: User,
    cluster: Cluster,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """Through the image cache (run_one); then the image's entries go when another image's
    import passes the cache's limit (a site's cache_limit_mib of 0), and when pruned (on the
    scratch, and on the nodes); nothing staged stays."""
    person = modes_image
    text = with_private_staging(script, private_staging, 3)
    text = with_setting(text, "local cache_limit_mib = 20480", "local cache_limit_mib = 0")
    podman = users_podman(person, site_runtime(text))
    options = ["-e", "SCRUN_JOB_NODELIST=n1", *(["--userns=keep-id"] if mode == "keep-id" else [])]
    run_one(podman, options, mode == "keep-id")
    imported = cache_entries(cluster, private_staging, person.uid)
    done = podman("run", "--rm", *options, BUSYBOX, "true")
    assert done.returncode == 0, done.stderr
    evicted = cache_entries(cluster, private_staging, person.uid)
    assert not set(imported) & set(evicted), (imported, evicted)

    done = podman("run", "--rm", *options, IMAGE, "true")  # imported again, to be pruned
    assert done.returncode == 0, done.stderr
    assert_users_clean(person)
    scratch, node_local = private_staging
    argv = [str(SCRUN_STAGE), "cache", "prune", "--scratch", str(scratch)]
    if script == "node-local":
        argv += ["--node-local", node_local, "--nodes", "all"]
    pruned = person.sh(shlex.join(argv))
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert cache_entries(cluster, private_staging, person.uid) == []


def test_an_images_modes_copied_whole_to_a_node(
    modes_image: User,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """node-local.lua without the cache (`image_cache = false`, as on a scratch that cannot
    hold an overlay's writable layer: NFS, Lustre, GPFS) copies the whole root filesystem to
    the node: run_one, and nothing staged stays."""
    text = with_private_staging("node-local", private_staging, 3)
    text = with_setting(text, "local image_cache = true", "local image_cache = false")
    run_one(users_podman(modes_image, site_runtime(text)), ["-e", "SCRUN_JOB_NODELIST=n1"], False)
    assert_users_clean(modes_image)
