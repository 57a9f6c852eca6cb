"""Container ids are never trusted; the root has a deterministic default."""

import os

import pytest
from scrunlib.errors import ContainerExists, InvalidInput
from scrunlib.spool import Spool, default_root, dir_name, socket_address, validate_id


@pytest.mark.parametrize("good", ["a", "abc-1", "A.b_c+d", "0" * 64, "x" * 1024])
def test_valid_ids(good):
    assert validate_id(good) == good


@pytest.mark.parametrize(
    "bad", ["", "..", ".hidden", "a/b", "/abs", "a\nb", "a b", "-x", "é", "x" * 1025]
)
def test_invalid_ids(bad):
    with pytest.raises(InvalidInput):
        validate_id(bad)


def test_default_root_prefers_xdg_runtime_dir():
    assert default_root({"XDG_RUNTIME_DIR": "/run/x"}) == "/run/x/scrun"
    assert default_root({"XDG_RUNTIME_DIR": ""}) == f"/run/user/{os.getuid()}/scrun"
    assert default_root({}) == f"/run/user/{os.getuid()}/scrun"


def test_long_ids_get_short_directory_names():
    long_id = "a" * 1024
    assert len(dir_name(long_id)) < 255
    assert dir_name(long_id) != dir_name("a" * 1023)
    assert dir_name("short") == "short"


def test_create_is_exclusive_and_private(tmp_path):
    spool = Spool(str(tmp_path / "root"), "c1")
    spool.create()
    assert os.stat(spool.path).st_mode & 0o777 == 0o700
    with pytest.raises(ContainerExists):
        Spool(str(tmp_path / "root"), "c1").create()
    spool.remove()
    assert not os.path.exists(spool.path)


def test_long_socket_paths_go_through_proc(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    address, dirfd = socket_address(str(deep / "anchor.sock"))
    try:
        assert dirfd is not None
        assert address == f"/proc/self/fd/{dirfd}/anchor.sock"
    finally:
        if dirfd is not None:
            os.close(dirfd)
    assert socket_address("/short/anchor.sock") == ("/short/anchor.sock", None)
