"""Atomic writes: all or nothing, and no temporary file left behind."""

import os
from pathlib import Path

import pytest
from scrunlib.files import remove_tree, write_atomically


def test_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old, and longer than the new content")
    write_atomically(str(target), "new", durable=True)
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()  # the rename over a directory fails after the temporary file was written
    with pytest.raises(OSError):
        write_atomically(str(target), "new")
    assert os.listdir(tmp_path) == ["taken"]


def test_remove_tree_removes_everything_but_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    (outside / "kept").mkdir(parents=True)
    tree = tmp_path / "spool"
    (tree / "bundle" / "deeper").mkdir(parents=True)
    (tree / "state.json").write_text("{}")
    (tree / "bundle" / "deeper" / "file").write_text("x")
    (tree / "bundle" / "rootfs").symlink_to(outside)
    (tree / "dangling").symlink_to(tmp_path / "nothing")
    remove_tree(str(tree))
    assert not tree.exists() and not tree.is_symlink()
    assert (outside / "kept").is_dir()


def test_remove_tree_leaves_a_link_and_a_missing_path_alone(tmp_path):
    target = tmp_path / "target"
    (target / "inside").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(str(link))
    remove_tree(str(tmp_path / "missing"))
    assert (target / "inside").is_dir() and link.is_symlink()
