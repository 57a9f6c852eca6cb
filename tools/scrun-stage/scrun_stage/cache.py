"""scrun-stage cache: a user's image cache on the scratch (docs/scrun-lua's scripts), for a
site admin or the user troubleshooting it: list its entries, verify them, prune them.

The layout is the scripts': `<scratch>/<uid>/scrun-cache/<key>/` holds an imported image
(`rootfs`), its `stamp` (a digest of its files' status-change times and sizes, taken at its
import), `users/<id>` (a mark for each container that runs on it) and `used` (touched at
each use); `<key>.lock` is the lock each import and removal holds (flock); `<key>.tmp` is an
import under way or killed half way, `changed-<key>-<pid>` an entry set aside because it
changed after its import. The scratch is the site's: `local scratch = "..."` in the
scrun.lua beside slurm.conf (found as `scrun-stage in` finds the script), or `--scratch`.
Its command lines (du, and find | sort | sha256sum for a stamp) are composed with plumbum
and run through scrunlib.processes; no engine waits for this tool.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pwd
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plumbum import local
from scrunlib import processes
from scrunlib.errors import ScrunError, UsageError

if TYPE_CHECKING:
    from plumbum.commands.base import BaseCommand

# A cache command's time limit, each (a stamp of a large image reads every inode).
COMMAND_SECONDS = 600.0

KEY = r"[0-9a-f]{64}"
_SCRATCH_SETTING = re.compile(r'^local scratch = "([^"\\]+)"\s*$', re.MULTILINE)

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

    @property
    def lock(self) -> Path:
        return self.path.parent / f"{self.key}.lock"


def scratch_of(script: str) -> str:
    """The scratch the site's scrun.lua `script` stages to (its `local scratch = "..."`)."""
    try:
        text = Path(script).read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror}; give --scratch") from None
    found = _SCRATCH_SETTING.search(text)
    if found is None:
        raise UsageError(f'{script} sets no `local scratch = "..."`; give --scratch')
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
        state, key = _state(path.name)
        if state is None or not path.is_dir() or path.is_symlink():
            continue
        users = sorted(p.name for p in (path / "users").glob("*"))
        used = path / "used"
        last_use = used.stat().st_mtime if used.exists() else None
        found.append(Entry(path, key, state, size_kib(path), last_use, users))
    return sorted(found, key=lambda e: (e.last_use is None, e.last_use or 0.0, e.key))


def _state(name: str) -> tuple[str | None, str]:
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
    out = _run(local["du"]["-sk", "--", str(path)], f"measuring {path}")
    return int(out.split(maxsplit=1)[0])


def stamp(rootfs: Path) -> str:
    """The stamp of an imported image's `rootfs`, as the scripts take it at its import:
    a digest of each file's path, status-change time and size, in C order."""
    listing = local["find"][".", "-printf", "%P\\t%C@ %s\\0"].with_cwd(str(rootfs))
    digest = listing | local["sort"]["-z"].with_env(LC_ALL="C") | local["sha256sum"]
    return _run(digest, f"stamping {rootfs}").split(maxsplit=1)[0]


def changed(entry: Entry) -> bool:
    """Whether an imported image changed after its import (its stamp is not its files')."""
    try:
        recorded = (entry.path / "stamp").read_text().strip()
    except OSError:
        return True
    return stamp(entry.path / "rootfs") != recorded


def prune(found: list[Entry], to_size_kib: int | None) -> tuple[list[Entry], list[Entry]]:
    """Remove the entries no container uses, least recently used first: all of them, or
    until the cache holds at most `to_size_kib`; each under its key's lock, as the scripts
    remove one (an import under way holds it: its `.tmp` stays). Returns (removed, kept
    in use)."""
    total = sum(entry.size_kib for entry in found)
    removed, in_use = [], []
    for entry in found:
        if to_size_kib is not None and total <= to_size_kib:
            break
        if entry.users:
            in_use.append(entry)
        elif _remove(entry):
            removed.append(entry)
            total -= entry.size_kib
    return removed, in_use


def _remove(entry: Entry) -> bool:
    """Remove `entry` if its lock is free and no container marked it meanwhile."""
    with open(entry.lock, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if any((entry.path / "users").glob("*")):
            return False
        try:
            shutil.rmtree(entry.path)
        except OSError as exc:
            raise CacheError(f"cannot remove {entry.path}: {exc.strerror}") from None
    return True


def _run(command: BaseCommand, what: str) -> str:
    """`command`'s output; CacheError naming `what` when it fails."""
    try:
        code, out, err = processes.run_composed(command, COMMAND_SECONDS)
    except (processes.CannotRun, processes.TimedOut) as exc:
        raise CacheError(f"{what} failed: {exc}") from None
    if code != 0:
        raise CacheError(f"{what} failed (exit {code}): {err.strip() or out.strip()}")
    return out


# -- the command ---------------------------------------------------------------------------


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    """`scrun-stage cache list|verify|prune` and their options."""
    text = "list, verify or prune a user's image cache on the scratch"
    cache = commands.add_parser(
        "cache",
        help=text,
        description=f"{text[0].upper()}{text[1:]} (docs/scrun-lua's scripts: "
        "<scratch>/<uid>/scrun-cache).",
        epilog=CACHE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--scratch",
        metavar="DIR",
        help="the scratch (default: the `scratch` setting of the site's scrun.lua)",
    )
    common.add_argument("--user", metavar="NAME|UID", help="another user's cache (root only)")
    common.add_argument("--script", metavar="PATH", help="scrun.lua (default: beside slurm.conf)")
    common.add_argument("-f", "--slurm-conf", metavar="PATH", help="slurm.conf (as for `in`)")
    common.add_argument("--debug", action="store_true", help="an internal error's traceback")
    for name, help_text in (
        ("list", "each entry: key, size, last use, the containers using it, its state"),
        ("verify", "recompute each image's stamp; exit 1 naming those that changed"),
        ("prune", "remove the entries no container uses, least recently used first"),
    ):
        action = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        action.set_defaults(verbose=0)
        if name == "prune":
            action.add_argument(
                "--to-size",
                type=int,
                metavar="MIB",
                help="remove only until the cache holds at most MIB (default: all unused)",
            )


CACHE_EPILOG = """\
states:
  ok                 an imported image (`verify` checks it was not changed since)
  changed            set aside by a script: it changed after its import (removed once unused)
  incomplete import  an import under way, or killed half way (never used)

exit status:
  0  done (verify: every image is as imported)
  1  verify found changed images (named on stderr), or an entry could not be read or removed
  2  usage error (no cache there, no scratch setting, --user without being root)
"""


def run(args: argparse.Namespace, script: str) -> tuple[str, int]:
    """The report for `args.action` on stdout, and the exit status."""
    scratch = args.scratch or scratch_of(script)
    cache = cache_dir(scratch, user_id(args.user))
    found = entries(cache)
    if args.action == "list":
        return render(cache, found), 0
    if args.action == "verify":
        bad = [entry for entry in found if entry.state == OK and changed(entry)]
        lines = [f"{'CHANGED' if entry in bad else entry.state:<17} {entry.key}" for entry in found]
        if bad:
            names = ", ".join(entry.key for entry in bad)
            raise VerifyFailed("\n".join(lines) + "\n", f"changed after their import: {names}")
        return "\n".join(lines) + ("\n" if lines else ""), 0
    limit = None if args.to_size is None else args.to_size * 1024
    removed, in_use = prune(found, limit)
    lines = [f"removed  {entry.path.name} ({_size(entry.size_kib)})" for entry in removed]
    lines += [f"in use   {entry.path.name} by {', '.join(entry.users)}" for entry in in_use]
    return "\n".join(lines) + ("\n" if lines else ""), 0


class VerifyFailed(CacheError):
    """verify's report, and the one line naming what changed."""

    def __init__(self, report: str, message: str) -> None:
        super().__init__(message)
        self.report = report


def render(cache: Path, found: list[Entry]) -> str:
    lines = [f"cache {cache}: {len(found)} entries, {_size(sum(e.size_kib for e in found))}"]
    lines.append(f"{'KEY':<64}  {'SIZE':>9}  {'LAST USE':<19}  {'STATE':<17}  IN USE BY")
    for entry in found:
        used = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.last_use))
            if entry.last_use is not None
            else "-"
        )
        lines.append(
            f"{entry.key:<64}  {_size(entry.size_kib):>9}  {used:<19}  {entry.state:<17}  "
            f"{', '.join(entry.users) or '-'}"
        )
    return "\n".join(lines) + "\n"


def _size(kib: int) -> str:
    return f"{kib / 1048576:.1f} GiB" if kib >= 1048576 else f"{(kib + 1023) // 1024} MiB"
