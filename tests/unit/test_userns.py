"""Running Slurm commands as the real user from inside a rootless user namespace."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from scrunlib import processes, userns

ROOTLESS_PODMAN_MAP = "         0       1001          1\n         1     165536      65536\n"
HOST_MAP = "         0          0 4294967295\n"


@pytest.mark.parametrize(
    ("id_map", "inside", "outside"),
    [
        (ROOTLESS_PODMAN_MAP, 0, 1001),
        (ROOTLESS_PODMAN_MAP, 1, 165536),
        (ROOTLESS_PODMAN_MAP, 1000, 166535),
        (ROOTLESS_PODMAN_MAP, 65537, None),
        (HOST_MAP, 0, 0),
        (HOST_MAP, 1001, 1001),
        ("", 0, None),
        ("garbage\n0 x 1\n", 0, None),
    ],
)
def test_outside_id(id_map: str, inside: int, outside: int | None) -> None:
    assert userns.outside_id(id_map, inside) == outside


@pytest.fixture
def real(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], None]:
    """Pretend the host sees us as the given (uid, gid)."""

    def pretend(uid: int, gid: int) -> None:
        monkeypatch.setattr(userns, "real_ids", lambda: (uid, gid))

    return pretend


def test_outside_a_namespace_commands_run_as_they_are(real: Callable[[int, int], None]) -> None:
    real(os.getuid(), os.getgid())
    assert not userns.in_other_identity()
    assert userns.as_real_user(["/usr/bin/salloc", "--no-shell"]) == [
        "/usr/bin/salloc",
        "--no-shell",
    ]


def test_inside_rootless_podman_commands_get_the_real_ids(real: Callable[[int, int], None]) -> None:
    real(os.getuid() + 1001, os.getgid() + 1001)
    uid, gid = os.getuid() + 1001, os.getgid() + 1001
    argv = userns.as_real_user(["/usr/bin/srun", "--jobid", "7", "--", "true"])
    assert os.path.basename(argv[0]) == "unshare"
    assert argv[1:] == [
        "--user",
        f"--map-user={uid}",
        f"--map-group={gid}",
        "--keep-caps",
        "--",
        "/usr/bin/srun",
        "--jobid",
        "7",
        "--",
        "true",
    ]


def test_real_ids_come_from_this_processs_id_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside rootless podman uid and gid 0 are the user's own ids outside: the uid from
    uid_map, the gid from gid_map."""
    maps = {"/proc/self/uid_map": ROOTLESS_PODMAN_MAP, "/proc/self/gid_map": "0 1002 1\n"}
    monkeypatch.setattr(userns, "_read", maps.__getitem__)
    monkeypatch.setattr(userns, "_real_ids", [])  # not what an earlier call found
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(os, "getgid", lambda: 0)
    assert userns.real_ids() == (1001, 1002)
    assert userns.in_other_identity() and not userns.real_root()


@pytest.mark.parametrize(
    ("id_map", "turned"),
    [
        (ROOTLESS_PODMAN_MAP, "1001 0 1\n165536 1 65536\n"),
        (HOST_MAP, "0 0 4294967295\n"),
        ("garbage\n", ""),
    ],
)
def test_a_child_namespace_sees_the_hosts_ids_as_themselves(id_map: str, turned: str) -> None:
    assert userns._turned_around(id_map) == turned


def test_outside_a_namespace_scrun_lua_commands_run_as_they_are(
    real: Callable[[int, int], None],
) -> None:
    real(os.getuid(), os.getgid())
    assert userns.with_all_user_ids(["/bin/sh", "-c", "true"]) == (["/bin/sh", "-c", "true"], None)


def test_inside_rootless_podman_scrun_lua_commands_wait_for_their_id_maps(
    real: Callable[[int, int], None],
) -> None:
    real(os.getuid() + 1001, os.getgid() + 1001)
    argv, prelude = userns.with_all_user_ids(["/bin/sh", "-c", "rsync -a a/ b/"])
    assert os.path.basename(argv[0]) == "unshare"
    assert argv[1:5] == ["--user", "--keep-caps", "--", "/bin/sh"]
    assert argv[-3:] == ["/bin/sh", "-c", "rsync -a a/ b/"]
    assert prelude is userns._write_id_maps


def test_an_unshare_that_fails_is_one_cannot_run_with_its_reason() -> None:
    failing = "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1"
    with pytest.raises(processes.CannotRun) as raised:
        processes.run(
            ["/bin/sh", "-c", failing], {}, 10, merge_output=True, prelude=userns._write_id_maps
        )
    assert str(raised.value) == (
        "cannot run unshare: unshare: unshare failed: Operation not permitted"
    )
