"""Small per-user caches of facts that are slow to get and change only with a file.

Each cache is one file in the runtime root (private to the user) holding the identity of
the file the fact came from (path, size, modification time) and the fact as text. A cache
that is missing, stale or unwritable is simply not used: every reader can recompute.
"""

from __future__ import annotations

import os

from scrunlib.files import write_atomically


def identity(path: str) -> str:
    """What changes when `path` is replaced or edited (raises OSError when it is gone)."""
    info = os.stat(path)
    return f"{path} {info.st_size} {info.st_mtime_ns}"


def read(cache: str | None, key: str) -> str | None:
    """The text stored under `key`, None when the cache holds something else or nothing."""
    if not cache:
        return None
    try:
        with open(cache, encoding="utf-8") as stream:
            stored_key, _, text = stream.read().partition("\n")
    except OSError:
        return None
    return text if stored_key == key else None


def write(cache: str | None, key: str, text: str) -> None:
    """Best effort, atomic (a reader sees the old entry or the new): errors are ignored."""
    if not cache:
        return
    try:  # noqa: SIM105
        write_atomically(cache, f"{key}\n{text}")
    except OSError:
        pass
