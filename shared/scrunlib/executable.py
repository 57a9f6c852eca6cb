"""Find the container's program inside its root filesystem, as an OCI runtime does.

The OCI rule: a `process.args[0]` without a slash is looked up in the container's PATH
(`process.env`, else a default) inside its rootfs; one with a slash is relative to
`process.cwd`. slurmstepd does not know that rule: it resolves a relative argv[0] against
the compute node's own filesystem and PATH before the runtime sees it (Slurm 24.11 turned
`true` into the node's `/usr/bin/true`, missing from a /bin-only image). So scrun hands
srun an absolute path, found here.

Symlinks inside the rootfs are followed as the container would see them: an absolute
target starts again at the rootfs, `..` stops at it, nothing resolves to the host's files.
"""

from __future__ import annotations

import os
import posixpath
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# What runc and crun search when process.env has no PATH.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Linux gives up after 40 symlinks in one lookup (ELOOP).
MAX_SYMLINKS = 40


def resolve_in_root(rootfs: str, path: str) -> str | None:
    """The host path of the container path `path` (absolute) with every symlink resolved
    inside `rootfs`; None when a link loops or a component is not a directory."""
    pending = [part for part in path.split("/") if part]
    resolved: list[str] = []  # components below rootfs, none a symlink
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        host = os.path.join(rootfs, *resolved, part)
        try:
            mode = os.lstat(host).st_mode
        except OSError:
            # Missing: the rest cannot exist either; the caller's stat says so.
            return os.path.join(rootfs, *resolved, part, *pending)
        if stat.S_ISLNK(mode):
            links += 1
            if links > MAX_SYMLINKS:
                return None
            target = os.readlink(host)
            if target.startswith("/"):
                resolved = []
            pending = [p for p in target.split("/") if p] + pending
            continue
        if pending and not stat.S_ISDIR(mode):
            return None
        resolved.append(part)
    return os.path.join(rootfs, *resolved)


def is_executable(rootfs: str, path: str) -> bool:
    """Whether the container path `path` is a regular file with an execute bit, inside
    `rootfs`."""
    host = resolve_in_root(rootfs, path)
    if host is None:
        return False
    try:
        mode = os.stat(host).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and bool(mode & 0o111)


def container_path(env: Sequence[str]) -> str:
    """The PATH the container's process gets: its last `PATH=` entry, else the default."""
    found = DEFAULT_PATH
    for entry in env:
        if entry.startswith("PATH="):
            found = entry[len("PATH=") :]
    return found


def find(rootfs: str, name: str, env: Sequence[str], cwd: str) -> str | None:
    """The absolute container path `name` means: with a slash, relative to `cwd` (checked
    by the runtime, not here); without one, the first executable match in the PATH.
    None when the PATH has no such program."""
    if "/" in name:
        return posixpath.normpath(posixpath.join(cwd, name))
    for directory in container_path(env).split(":"):
        if not directory:
            continue  # an empty entry means the cwd to some shells: never to runc or crun
        candidate = posixpath.normpath(posixpath.join(cwd, directory, name))
        if is_executable(rootfs, candidate):
            return candidate
    return None
