"""scrun-stage cache: a user's image cache on the scratch (docs/scrun-lua's scripts), for a
site admin or the user troubleshooting it: list its entries, verify them, prune them.

The layout is the scripts': `<scratch>/<uid>/scrun-cache/<key>/` holds an imported image
(`rootfs`), its `stamp` (a digest of its files' status-change times and sizes, taken at its
import), `users/<id>` (a mark for each container that runs on it) and `used` (touched at
each use); `<key>.lock` is the lock each import and removal holds (flock); `<key>.tmp` is an
import under way or killed half way, `changed-<key>-<pid>` an entry set aside because it
changed after its import; `layers/<digest>` holds the key of an engine's image layers (not
an entry: prune removes those whose entry is gone, as the scripts do after an import).
The scratch is the site's: `local scratch = "..."` in the scrun.lua beside slurm.conf
(found as `scrun-stage in` finds the script), or `--scratch`.
Its command lines (du, and find | sort | sha256sum for a stamp) are composed with plumbum
and run through scrunlib.processes; no engine waits for this tool. With `--nodes`, the
copies node-local.lua keeps on the nodes too, each read by a step there (scrun_stage.node_cache).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from plumbum import local
from scrunlib import processes
from scrunlib.errors import ScrunError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from plumbum.commands.base import BaseCommand

# A cache command's time limit, each (a stamp of a large image reads every inode).
COMMAND_SECONDS = 600.0

KEY = r"[0-9a-f]{64}"

OK, CHANGED, INCOMPLETE = "ok", "changed", "incomplete import"


class CacheError(ScrunError):
    """A cache entry could not be read, stamped or removed."""


@dataclass
class Entry:
    """One directory of the cache: an image (ok), one set aside (changed), or an import
    under way or killed half way (incomplete import)."""

    path: Path
    key: str
    state: str
    size_kib: int
    last_use: float | None  # `used`'s time; None: never used (an incomplete import)
    users: list[str]  # the containers that run on it
    node: str | None = None  # the node whose copy it is (node-local.lua); None: the scratch's
    copy_changed: bool = False  # a node's copy that its step's verify found changed

    @property
    def lock(self) -> Path:
        return self.path.parent / f"{self.key}.lock"


@dataclass
class Place:
    """A cache, the scratch's or a node's (`label` names it): its entries (None: it has
    none, or `unread` says why it was not read)."""

    label: str
    entries: list[Entry] | None
    unread: str | None = None


def setting_of(script: str, name: str, option: str) -> str:
    """A path the site's scrun.lua `script` sets (its `local NAME = "..."`, e.g. `scratch`);
    `option` is what gives it instead."""
    try:
        text = Path(script).read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror}; give {option}") from None
    found = re.search(rf'^local {name} = "([^"\\]+)"\s*$', text, re.MULTILINE)
    if found is None:
        raise UsageError(f'{script} sets no `local {name} = "..."`; give {option}')
    return found.group(1)


def user_id(name: str | None) -> int:
    """The uid whose cache to read: the caller's, or `name`'s (a name or a uid; root only)."""
    if name is None:
        return os.getuid()
    try:
        uid = int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid
    except KeyError:
        raise UsageError(f"no user {name!r}") from None
    if uid != os.getuid() and os.getuid() != 0:
        raise UsageError("only root may name another user's cache (--user)")
    return uid


def cache_dir(scratch: str, uid: int) -> Path:
    return Path(scratch) / str(uid) / "scrun-cache"


def entries(cache: Path) -> list[Entry]:
    """The cache's entries, least recently used first (never used ones last)."""
    if not cache.is_dir():
        raise UsageError(f"no image cache at {cache}")
    found = []
    for path in sorted(cache.iterdir()):
        state, key = state_of(path.name)
        if state is None or not path.is_dir() or path.is_symlink():
            continue
        users = sorted(p.name for p in (path / "users").glob("*"))
        used = path / "used"
        last_use = used.stat().st_mtime if used.exists() else None
        found.append(Entry(path, key, state, size_kib(path), last_use, users))
    return sorted(found, key=least_recently_used)


def least_recently_used(entry: Entry) -> tuple[bool, float, str]:
    """The order entries are listed and pruned in: least recently used first, never used
    ones (an incomplete import) last."""
    return entry.last_use is None, entry.last_use or 0.0, entry.key


def state_of(name: str) -> tuple[str | None, str]:
    """An entry's state and key, from its directory's name (None: not an entry)."""
    if re.fullmatch(KEY, name):
        return OK, name
    if match := re.fullmatch(rf"changed-({KEY})-\d+", name):
        return CHANGED, match.group(1)
    if match := re.fullmatch(rf"({KEY})\.tmp", name):
        return INCOMPLETE, match.group(1)
    return None, name


def size_kib(path: Path) -> int:
    """What `path` holds on disk, as `du -sk` counts it."""
    out = run_command(local["du"]["-sk", "--", str(path)], f"measuring {path}")
    return int(out.split(maxsplit=1)[0])


def stamp(rootfs: Path) -> str:
    """The stamp of an imported image's `rootfs`, as the scripts take it at its import:
    a digest of each file's path, status-change time and size, in C order."""
    listing = local["find"][".", "-printf", "%P\\t%C@ %s\\0"].with_cwd(str(rootfs))
    digest = listing | local["sort"]["-z"].with_env(LC_ALL="C") | local["sha256sum"]
    return run_command(digest, f"stamping {rootfs}").split(maxsplit=1)[0]


def changed(entry: Entry) -> bool:
    """Whether an imported image changed after its import (its stamp is not its files')."""
    try:
        recorded = (entry.path / "stamp").read_text().strip()
    except OSError:
        return True
    return stamp(entry.path / "rootfs") != recorded


def prune(
    found: list[Entry], to_size_kib: int | None, remove: Callable[[Entry], bool] | None = None
) -> tuple[list[Entry], list[Entry]]:
    """Remove the entries no container uses, least recently used first: all of them, or
    until the cache holds at most `to_size_kib`; each under its key's lock, as the scripts
    remove one (an import under way holds it: its `.tmp` stays), or by `remove` (a node's
    entries: chosen here, removed by a step there). Returns (removed, kept in use)."""
    remove = remove or _remove
    total = sum(entry.size_kib for entry in found)
    removed, in_use = [], []
    for entry in found:
        if to_size_kib is not None and total <= to_size_kib:
            break
        if entry.users:
            in_use.append(entry)
        elif remove(entry):
            removed.append(entry)
            total -= entry.size_kib
    return removed, in_use


def forget_gone(cache: Path) -> None:
    """Remove the keys remembered for engines' image layers (`layers/<digest>`) whose entry
    is gone, and `layers` itself once empty: a later container of those layers lists its
    image again."""
    layers = cache / "layers"
    if layers.is_symlink() or not layers.is_dir():
        return
    for memo in layers.iterdir():
        try:
            key = memo.read_text().strip()
        except OSError:
            continue
        if not (re.fullmatch(KEY, key) and (cache / key).is_dir()):
            memo.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # (not empty: some are kept)
        layers.rmdir()


def _open_lock(entry: Entry) -> int:
    """A descriptor of `entry`'s lock file, made if missing. Root pruning a user's cache
    makes it the cache owner's (a root-owned lock would refuse that user's next import);
    a link planted in its place is not followed."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(entry.lock, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return os.open(entry.lock, flags)
        owner = entry.lock.parent.stat()
        if os.geteuid() == 0 and owner.st_uid != 0:
            os.fchown(fd, owner.st_uid, owner.st_gid)
    except OSError as exc:
        raise CacheError(f"cannot lock {entry.lock}: {exc.strerror}") from None
    return fd


def _remove(entry: Entry) -> bool:
    """Remove `entry` if its lock is free and no container marked it meanwhile."""
    with open(_open_lock(entry), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if any((entry.path / "users").glob("*")):
            return False
        try:
            _remove_tree(entry.path)
        except OSError as exc:
            raise CacheError(f"cannot remove {entry.path}: {exc.strerror}") from None
    return True


def _remove_tree(path: Path) -> None:
    """Remove the tree `path`. An image's read-only directories with files in them (Fedora's
    0550 /root, a 0555 directory) refuse their owner's removal, not root's: for the owner
    each directory is made writable first (its links are left alone), then removed."""
    try:
        shutil.rmtree(path)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        _own_writable(str(path))
        for top, dirs, _files in os.walk(path):
            for name in dirs:
                _own_writable(os.path.join(top, name))
        shutil.rmtree(path)


def _own_writable(path: str) -> None:
    """`path`, a directory (not a link), readable, writable and searchable by its owner."""
    status = os.lstat(path)
    if stat.S_ISDIR(status.st_mode) and stat.S_IMODE(status.st_mode) & 0o700 != 0o700:
        os.chmod(path, stat.S_IMODE(status.st_mode) | 0o700)


def run_command(command: BaseCommand, what: str) -> str:
    """`command`'s output; CacheError naming `what` when it fails."""
    try:
        code, out, err = processes.run_composed(command, COMMAND_SECONDS)
    except (processes.CannotRun, processes.TimedOut) as exc:
        raise CacheError(f"{what} failed: {exc}") from None
    if code != 0:
        raise CacheError(f"{what} failed (exit {code}): {err.strip() or out.strip()}")
    return out
