"""Writing a file so that a reader never sees half of it."""

from __future__ import annotations

import contextlib
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
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
