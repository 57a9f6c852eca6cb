"""Runtime roots and container directories another user could plant are refused; so are
jobs of another user; rootfs mounts only a rootless namespace has are detected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from scrunlib import ownership, userns
from scrunlib.errors import ScrunError


def test_a_private_directory_is_accepted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    ownership.check_private_dir(str(root), "runtime root")


def test_a_missing_directory_is_fine_unless_required(tmp_path: Path) -> None:
    ownership.check_private_dir(str(tmp_path / "none"), "runtime root")
    with pytest.raises(ScrunError, match="does not exist"):
        ownership.check_private_dir(str(tmp_path / "none"), "runtime root", missing_ok=False)


def test_a_symbolic_link_is_refused_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "root").symlink_to(target)
    with pytest.raises(ScrunError, match=r"refusing runtime root .*/root: it is a symbolic link"):
        ownership.check_private_dir(str(tmp_path / "root"), "runtime root")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
def test_group_or_other_writable_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(ScrunError, match="writable by group or others"):
        ownership.check_private_dir(str(root), "runtime root")


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").write_text("")
    with pytest.raises(ScrunError, match="not a directory"):
        ownership.check_private_dir(str(tmp_path / "root"), "runtime root")


def test_another_users_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: root.stat().st_uid + 1)
    monkeypatch.setattr(ownership, "real_root", lambda: False)
    with pytest.raises(ScrunError, match=r"belongs to .*, not to you"):
        ownership.check_private_dir(str(root), "container directory")
    monkeypatch.setattr(ownership, "real_root", lambda: True)  # the host's root may
    ownership.check_private_dir(str(root), "container directory")


def test_only_the_callers_own_job_may_be_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ownership, "real_ids", lambda: (1001, 1001))
    ownership.check_job_owner(5, {"UserId": "alice(1001)"})
    with pytest.raises(ScrunError, match=r"job 5 belongs to bob\(1002\), not to you"):
        ownership.check_job_owner(5, {"UserId": "bob(1002)"})
    with pytest.raises(ScrunError, match="cannot tell who owns job 5"):
        ownership.check_job_owner(5, {})


def test_umask_keeps_group_and_others_from_writing(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        ownership.restrict_umask()
        (tmp_path / "f").write_text("")
        assert (tmp_path / "f").stat().st_mode & 0o022 == 0
    finally:
        os.umask(previous)


MOUNTINFO = """\
22 1 254:1 / / rw,relatime - ext4 /dev/vda1 rw
30 22 0:26 / /run rw,nosuid - tmpfs tmpfs rw
41 22 0:40 / /home/a/storage/overlay/abc/merged rw,nodev - overlay overlay rw,lowerdir=x
42 22 0:41 / /mnt/with\\040space rw - fuse.fuse-overlayfs fuse-overlayfs rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/a/storage/overlay/abc/merged", ("/home/a/storage/overlay/abc/merged", "overlay")),
        (
            "/home/a/storage/overlay/abc/merged/bin",
            ("/home/a/storage/overlay/abc/merged", "overlay"),
        ),
        ("/home/a/storage/overlay/abc/mergedx", ("/", "ext4")),
        ("/run/user/1", ("/run", "tmpfs")),
        ("/mnt/with space/rootfs", ("/mnt/with space", "fuse.fuse-overlayfs")),
    ],
)
def test_mount_of(path: str, expected: tuple[str, str]) -> None:
    assert userns.mount_of(path, MOUNTINFO) == expected


def test_a_namespace_only_overlay_is_refused_in_a_rootless_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(userns, "_read", lambda path: MOUNTINFO)
    rootfs = "/home/a/storage/overlay/abc/merged"
    monkeypatch.setattr(userns, "in_other_identity", lambda: False)
    userns.check_rootfs_visible(rootfs)  # rootful: the host's own mount, nodes see it
    monkeypatch.setattr(userns, "in_other_identity", lambda: True)
    with pytest.raises(
        ScrunError, match=r"compute nodes cannot see it: stage it with a scrun\.lua"
    ):
        userns.check_rootfs_visible(rootfs)
    userns.check_rootfs_visible("/home/a/vfs/dir/abc")  # vfs: a plain directory
