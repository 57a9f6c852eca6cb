"""Find the container's program inside its root filesystem, as an OCI runtime does.

The OCI rule: a `process.args[0]` without a slash is looked up in the container's PATH
(`process.env`, else a default) inside its rootfs; one with a slash is relative to
`process.cwd`. slurmstepd does not know that rule: it resolves a relative argv[0] against
the compute node's own filesystem and PATH before the runtime sees it (Slurm 24.11 turned
`true` into the node's `/usr/bin/true`, missing from a /bin-only image). So scrun hands
srun an absolute path, found here.

Symlinks inside the rootfs are followed as the container would see them: an absolute
target starts again at the rootfs, `..` stops at it, nothing resolves to the host's files.
The config's bind and overlay mounts count, as they do for the runtime (which looks the
program up once they are made): a staging script may give the container its image as an
overlay mount per top-level directory over an otherwise empty rootfs.
"""

from __future__ import annotations

import os
import posixpath
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# What runc and crun search when process.env has no PATH.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Linux gives up after 40 symlinks in one lookup (ELOOP).
MAX_SYMLINKS = 40


class RootView:
    """The container's files as the host sees them: `rootfs`, with `mounts` over it (a
    container directory -> the host directories that make it, the top one first: a bind
    mount's source, an overlay's upper and lower layers)."""

    __slots__ = ("mounts", "rootfs")

    def __init__(self, rootfs: str, mounts: Mapping[str, Sequence[str]] | None = None) -> None:
        self.rootfs, self.mounts = rootfs, mounts or {}

    def lstat(self, parts: Sequence[str]) -> tuple[str, int] | None:
        """The host path and mode of the container path made of `parts` (no symlink among
        all but the last), None when missing (an overlay's whiteout included)."""
        for depth in range(len(parts), 0, -1):
            layers = self.mounts.get("/" + "/".join(parts[:depth]))
            if layers is not None:
                for layer in layers:
                    host = os.path.join(layer, *parts[depth:])
                    try:
                        status = os.lstat(host)
                    except OSError:
                        continue
                    if stat.S_ISCHR(status.st_mode) and status.st_rdev == 0:
                        return None  # deleted in this layer
                    return host, status.st_mode
                return None
        host = os.path.join(self.rootfs, *parts)
        try:
            return host, os.lstat(host).st_mode
        except OSError:
            pass
        # the runtime makes the missing directories a mount's destination lies in
        prefix = "/" + "/".join(parts) + "/"
        if any(destination.startswith(prefix) for destination in self.mounts):
            return host, stat.S_IFDIR | 0o755
        return None


def config_mounts(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """The bind and overlay mounts of an OCI config, as RootView takes them (the last of
    two at one destination wins, as it is made last)."""
    found: dict[str, list[str]] = {}
    mounts = config.get("mounts")
    for mount in mounts if isinstance(mounts, list) else ():
        # the runtime on the node judges the mounts: one of the wrong shape counts for nothing
        raw_options = mount.get("options", []) if isinstance(mount, dict) else None
        if not isinstance(raw_options, list) or not isinstance(mount.get("destination"), str):
            continue
        destination = posixpath.normpath("/" + mount["destination"].lstrip("/"))
        options = [str(option) for option in raw_options]
        if mount.get("type") == "overlay":
            layers = {}
            for option in options:
                key, equals, value = option.partition("=")
                if equals:
                    layers[key] = value
            upper = [layers["upperdir"]] if "upperdir" in layers else []
            found[destination] = upper + layers.get("lowerdir", "").split(":")
        elif mount.get("type") == "bind" or "bind" in options or "rbind" in options:
            found[destination] = [str(mount.get("source", ""))]
    return found


def resolve_in_root(rootfs: str | RootView, path: str) -> str | None:
    """The host path of the container path `path` (absolute) with every symlink resolved
    inside `rootfs`; None when a link loops or a component is not a directory."""
    view = rootfs if isinstance(rootfs, RootView) else RootView(rootfs)
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
        found = view.lstat([*resolved, part])
        if found is None:
            # Missing: the rest cannot exist either; the caller's stat says so.
            return os.path.join(view.rootfs, *resolved, part, *pending)
        host, mode = found
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
    found = view.lstat(resolved)
    return found[0] if found is not None else view.rootfs


def is_executable(rootfs: str | RootView, path: str) -> bool:
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


def find(rootfs: str | RootView, name: str, env: Sequence[str], cwd: str) -> str | None:
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
