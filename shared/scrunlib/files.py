"""Writing a file so that a reader never sees half of it; removing a directory tree."""

from __future__ import annotations

import os


def write_atomically(path: str, text: str, *, durable: bool = False) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader
    sees the old content or the new, never part of it. `durable`: fsync before the rename,
    for a file that must survive a crash (state.json). Raises OSError; the temporary file
    never stays behind."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        import contextlib  # only here: `scrun state` imports this module

        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_tree(path: str) -> None:
    """`shutil.rmtree(path, ignore_errors=True)` without importing shutil on every `scrun
    delete` (lint_tree/hotpath.py). Symbolic links are removed, never followed; what cannot be
    removed stays, silently, as with rmtree's ignore_errors."""
    if os.path.islink(path):
        return  # rmtree refuses a link to a directory, too
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    try:  # noqa: SIM105
        os.rmdir(path)
    except OSError:
        pass
