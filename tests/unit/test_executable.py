"""The container's program is found in its PATH inside its rootfs, never on the host."""

import os
import stat

import pytest
from scrunlib import executable


def program(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


@pytest.fixture
def rootfs(tmp_path):
    """alpine's layout: busybox and sh in /bin, applets linked from /usr/bin."""
    root = tmp_path / "rootfs"
    program(root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "env").symlink_to("/bin/busybox")
    return root


ALPINE_ENV = ["HOME=/root", "PATH=/usr/local/bin:/usr/bin:/bin"]


def test_first_match_in_the_container_path(rootfs):
    program(rootfs / "usr" / "local" / "bin" / "sh")
    assert executable.find(str(rootfs), "sh", ALPINE_ENV, "/") == "/usr/local/bin/sh"


def test_a_later_path_entry_when_earlier_ones_lack_it(rootfs):
    assert executable.find(str(rootfs), "sh", ALPINE_ENV, "/") == "/bin/sh"


def test_the_link_found_is_kept_not_its_target(rootfs):
    """busybox picks its applet by argv[0]'s name."""
    assert executable.find(str(rootfs), "env", ALPINE_ENV, "/") == "/usr/bin/env"


def test_absolute_symlinks_resolve_inside_the_rootfs(rootfs):
    """/usr/bin/true exists on the host, not in the image: the link is no match."""
    assert os.path.exists("/usr/bin/true")
    (rootfs / "usr" / "local" / "bin").mkdir(parents=True)
    (rootfs / "usr" / "local" / "bin" / "true").symlink_to("/usr/bin/true")
    program(rootfs / "bin" / "true")
    assert executable.find(str(rootfs), "true", ALPINE_ENV, "/") == "/bin/true"
    assert executable.find(str(rootfs), "true", ["PATH=/usr/local/bin"], "/") is None


def test_dotdot_stops_at_the_rootfs(rootfs):
    escape = "../" * 20 + "bin/busybox"
    (rootfs / "usr" / "bin" / "up").symlink_to(escape)
    assert executable.resolve_in_root(str(rootfs), "/usr/bin/up") == str(rootfs / "bin/busybox")
    assert executable.find(str(rootfs), "up", ALPINE_ENV, "/") == "/usr/bin/up"


def test_symlinked_directories_in_the_path(rootfs):
    (rootfs / "sbin").symlink_to("/usr/bin")  # as on merged-/usr images
    assert executable.find(str(rootfs), "env", ["PATH=/sbin"], "/") == "/sbin/env"


def test_loops_and_non_programs_are_no_match(rootfs):
    (rootfs / "usr" / "bin" / "loop").symlink_to("loop")
    (rootfs / "usr" / "bin" / "data").write_text("")
    (rootfs / "usr" / "bin" / "dir").mkdir()
    for name in ("loop", "data", "dir", "missing"):
        assert executable.find(str(rootfs), name, ALPINE_ENV, "/") is None
    assert executable.resolve_in_root(str(rootfs), "/usr/bin/loop") is None
    assert executable.resolve_in_root(str(rootfs), "/bin/busybox/x") is None


def test_without_path_the_runtimes_default(rootfs):
    program(rootfs / "usr" / "sbin" / "sh")
    assert executable.find(str(rootfs), "sh", ["HOME=/"], "/") == "/usr/sbin/sh"
    assert executable.container_path(["PATH=/a", "PATH=/b"]) == "/b"


def test_relative_path_entries_and_names_with_a_slash_use_the_cwd(rootfs):
    program(rootfs / "work" / "tools" / "prog")
    assert executable.find(str(rootfs), "prog", ["PATH=tools:/bin"], "/work") == "/work/tools/prog"
    assert executable.find(str(rootfs), "./prog", ALPINE_ENV, "/work") == "/work/prog"
    assert executable.find(str(rootfs), "../x/y", ALPINE_ENV, "/work/a") == "/work/x/y"
    assert executable.find(str(rootfs), "/opt/p", ALPINE_ENV, "/work") == "/opt/p"
    assert executable.find(str(rootfs), "prog", ["PATH=:/bin"], "/work/tools") is None


def test_the_configs_overlay_and_bind_mounts_count(tmp_path):
    """An image given as overlay mounts over an empty rootfs (a staging script's image
    cache): the program is found in the layers, the upper one first, a whiteout hides the
    lower one's; a bind mount's source stands for its destination."""
    root, lower, upper, tools = (tmp_path / name for name in ("root", "lower", "upper", "tools"))
    (root / "bin").mkdir(parents=True)
    program(lower / "busybox")
    (lower / "sh").symlink_to("busybox")
    (lower / "cat").symlink_to("/bin/busybox")
    upper.mkdir()
    program(tools / "probe")
    config = {
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/bin",
                "type": "overlay",
                "source": "overlay",
                "options": [f"lowerdir={lower}", f"upperdir={upper}", "workdir=/w", "userxattr"],
            },
            {"destination": "/opt/tools", "source": str(tools), "options": ["rbind", "ro"]},
        ]
    }
    view = executable.RootView(str(root), executable.config_mounts(config))
    env = ["PATH=/opt/tools:/usr/bin:/bin"]
    assert executable.find(str(root), "sh", env, "/") is None  # the rootfs alone has none
    assert executable.find(view, "sh", env, "/") == "/bin/sh"
    assert executable.find(view, "cat", env, "/") == "/bin/cat"
    assert executable.find(view, "probe", env, "/") == "/opt/tools/probe"
    if os.getuid() == 0:  # a whiteout: deleted in the container's layer
        os.mknod(upper / "sh", 0o600 | stat.S_IFCHR, os.makedev(0, 0))
        assert executable.find(view, "sh", env, "/") is None
    program(upper / "cat")  # the upper layer's own
    assert executable.resolve_in_root(view, "/bin/cat") == str(upper / "cat")
