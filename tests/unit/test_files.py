"""Atomic writes: all or nothing, and no temporary file left behind."""

import os
from pathlib import Path

import pytest
from scrunlib.files import write_atomically


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
