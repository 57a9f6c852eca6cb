"""Who the caller really is when scrun runs inside a rootless user namespace.

Rootless podman (and rootless dockerd through rootlesskit) runs its OCI runtime in a user
namespace where the user is uid 0 and the container's other ids map to the user's
subordinate ids. munge vouches for the real uid, but salloc and srun also put their own
getuid() (0) into the request, and slurmctld refuses: "Requested UID=0 doesn't match user
UID=1000". So every Slurm command scrun runs goes through

    unshare --user --map-user=<real uid> --map-group=<real gid> --keep-caps -- COMMAND...

a child user namespace in which the real ids are the process's own (scrun.lua's commands
get one that maps every id ours does, as the host's: with_all_user_ids). It stays in the
caller's mount namespace, so the command sees the same files (a rootfs that podman mounted
only there included). --keep-caps keeps the powers that podman's uid 0 had over the user's
own files (only the user's ids are mapped there): the man page's scrun.lua removes its
staged copy with `rm -r`, and an image's read-only directories (mode 0555) must not stop
it. Over anyone else's files the command has no more rights than the real user.

The real ids are our ids as the parent namespace sees them (/proc/self/uid_map and gid_map):
rootless podman and docker are one namespace below the host. Outside a user namespace, and
inside one that maps our ids to themselves, commands run as they are: the cost is one read
of each map file per process. Inside, it is one more exec (unshare), under a millisecond.
"""

from __future__ import annotations

import os

from scrunlib.errors import InvalidInput, ScrunError, reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Sequence

    # what writes a started child's id maps (scrunlib.processes.run's prelude)
    IdMapper = Callable[[subprocess.Popen[bytes]], None]

UNSHARE_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")


def outside_id(id_map: str, inside: int) -> int | None:
    """The parent namespace's id for `inside`, from the text of a uid_map/gid_map
    (`inside outside count` per line); None when `inside` is not mapped."""
    for line in id_map.splitlines():
        fields = line.split()
        if len(fields) != 3 or not all(field.isdigit() for field in fields):
            continue
        first, outside, count = (int(field) for field in fields)
        if first <= inside < first + count:
            return outside + inside - first
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as stream:
            return stream.read()
    except OSError:
        return ""  # no /proc: treated as no namespace


_real_ids: list[tuple[int, int]] = []  # real_ids()'s answer, once known


def real_ids() -> tuple[int, int]:
    """(uid, gid) of this process as the host sees them (read once per process)."""
    if not _real_ids:
        uid, gid = os.getuid(), os.getgid()
        real_uid = outside_id(_read("/proc/self/uid_map"), uid)
        real_gid = outside_id(_read("/proc/self/gid_map"), gid)
        _real_ids.append(
            (uid if real_uid is None else real_uid, gid if real_gid is None else real_gid)
        )
    return _real_ids[0]


def in_other_identity() -> bool:
    """True inside a user namespace where we are not who the host thinks we are (rootless
    podman's uid 0 is the real user)."""
    return real_ids() != (os.getuid(), os.getgid())


def real_root() -> bool:
    """The host's root (not a user namespace's uid 0)."""
    return real_ids()[0] == 0


def _unshare() -> str:
    for directory in UNSHARE_DIRS:
        candidate = os.path.join(directory, "unshare")
        if os.access(candidate, os.X_OK):
            return candidate
    raise ScrunError(
        "scrun runs in a user namespace (rootless podman or docker) and needs `unshare` "
        "(util-linux) to run Slurm commands as the real user; it is not installed"
    )


def as_real_user(argv: Sequence[str]) -> list[str]:
    """`argv`, run so that it has the real user's uid and gid (see the module's doc)."""
    if not in_other_identity():
        return list(argv)
    uid, gid = real_ids()
    return [
        _unshare(),
        "--user",
        f"--map-user={uid}",
        f"--map-group={gid}",
        "--keep-caps",
        "--",
        *argv,
    ]


# The shell between unshare and the command: it says it runs (in the new namespace), waits
# until its parent has written the namespace's id maps, then becomes the command.
_WAIT_FOR_ID_MAPS = 'printf x; read -r _; exec "$@" </dev/null'
# How long the shell may take to start and say so.
ID_MAP_SECONDS = 10.0


def with_all_user_ids(argv: Sequence[str]) -> tuple[list[str], IdMapper | None]:
    """`argv` and the prelude (scrunlib.processes.run's) that run it as the real user with
    every id of the user's that our namespace maps (theirs and their subordinate ids) as
    itself, and with our namespace's powers over them: in a child user namespace whose maps
    are ours turned around (host id N is N inside). unshare(1) can map more than the
    caller's own id only through newuidmap, which checks /etc/subuid for the namespace's
    uid 0 (root) and refuses; so we write the maps, as the namespace's owner.

    scrun.lua's commands run so: they copy the engine's storage, whose files belong to
    those ids (a `--userns=keep-id` container's root filesystem, 0700 and owned by a
    subordinate id, is out of the real user's reach), and may run Slurm's commands, which
    need the real uid. Outside a user namespace: `argv` as it is, no prelude."""
    if not in_other_identity():
        return list(argv), None
    return [_unshare(), "--user", "--keep-caps", "--", "/bin/sh", "-c", _WAIT_FOR_ID_MAPS,
            "sh", *argv], _write_id_maps  # fmt: skip


def _turned_around(id_map: str) -> str:
    """A uid_map/gid_map's lines with inside and outside swapped: written for a child
    namespace of ours, our outside ids (the host's) become its inside ids."""
    lines = []
    for line in id_map.splitlines():
        fields = line.split()
        if len(fields) == 3 and all(field.isdigit() for field in fields):
            lines.append(f"{fields[1]} {fields[0]} {fields[2]}\n")
    return "".join(lines)


def _write_id_maps(proc: subprocess.Popen[bytes]) -> None:
    """Once `proc` (the shell of with_all_user_ids) runs in its namespace, write its maps
    and let it go on. Raises processes.CannotRun with why it cannot."""
    import select

    from scrunlib.processes import CannotRun

    assert proc.stdout is not None and proc.stdin is not None  # run's prelude: both pipes
    readable, _, _ = select.select([proc.stdout], [], [], ID_MAP_SECONDS)
    said = os.read(proc.stdout.fileno(), 1) if readable else b""
    if said != b"x":  # unshare failed (its message follows), or hangs
        rest = os.read(proc.stdout.fileno(), 4096) if readable else b""
        text = (said + rest).decode(errors="replace").strip() or "it did not start in time"
        raise CannotRun("unshare", OSError(text))
    for name in ("uid_map", "gid_map"):
        try:
            with open(f"/proc/{proc.pid}/{name}", "w", encoding="ascii") as stream:
                stream.write(_turned_around(_read(f"/proc/self/{name}")))
        except OSError as exc:
            raise CannotRun("unshare", OSError(f"cannot write its {name}: {reason(exc)}")) from exc
    proc.stdin.write(b"\n")
    proc.stdin.flush()


# Filesystems a rootless engine mounts a container's rootfs with, inside its own mount
# namespace (podman's and rootlesskit's overlay, or fuse-overlayfs).
NAMESPACE_ONLY_TYPES = frozenset({"overlay", "fuse.fuse-overlayfs", "fuse-overlayfs"})


def mount_of(path: str, mountinfo: str) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount `path` lies on, from the text of
    /proc/self/mountinfo (`id parent dev root POINT options... - TYPE source options`)."""
    import re  # only inside a rootless engine's namespace

    octal_escape = re.compile(r"\\([0-7]{3})")  # mountinfo's \040 for a space and the like
    best = ("/", "")
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if len(fields) < 5 or not after:
            continue
        point = octal_escape.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, after.split()[0])
    return best


def check_rootfs_visible(rootfs: str) -> None:
    """Without scrun.lua the nodes run the rootfs where it is. Inside a rootless engine's
    namespaces, an overlay mount of it exists only there: the nodes would see an empty
    directory. Say so at create, before any job exists."""
    if not in_other_identity():
        return
    point, fstype = mount_of(os.path.realpath(rootfs), _read("/proc/self/mountinfo"))
    if point == "/" or fstype not in NAMESPACE_ONLY_TYPES:
        return
    raise InvalidInput(
        f"the container's root filesystem {rootfs} is on a mount ({fstype}) that exists only "
        "in rootless podman's or docker's own namespace, so the compute nodes cannot see it: "
        "stage it with a scrun.lua beside slurm.conf, or keep images where the nodes can read "
        "them (for example storage driver vfs on a shared filesystem)"
    )
