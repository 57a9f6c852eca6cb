"""Whose is it? Refuse state another user could have planted, and jobs of another user.

scrun keeps each container's state, socket, log and staged bundle under a runtime root that
often sits in a shared place (`$XDG_RUNTIME_DIR`, which a user may point at /tmp; `--root`).
If another user could make that root, or a container directory in it, be a symbolic link or
their own directory, they could redirect or read what scrun writes there, or feed it a forged
state. So a root or container directory is used only when it is a real directory (not a
link), owned by the caller, and not writable by group or others. The host's root may use
anyone's (to clean up after a user: `scrun --root /run/user/<uid>/scrun delete --force ID`).

Inside rootless podman the caller is uid 0 of its user namespace, which is the real user:
the kernel shows the user's files as owned by uid 0 there, so the same comparison holds.

Each check is one lstat (microseconds): it runs on every command.
"""

from __future__ import annotations

import os
import stat

from scrunlib.errors import ScrunError, reason
from scrunlib.userns import real_ids, real_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def _owner_name(uid: int) -> str:
    from scrunlib.users import user_name  # only for the refusal's message

    name = user_name(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def check_private_dir(path: str, what: str, missing_ok: bool = True) -> None:
    """Raise ScrunError unless `path` is a directory, not a link, the caller's own (any
    owner for the host's root), and not writable by group or others. A missing `path` is
    fine when `missing_ok` (there is nothing to follow yet)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if missing_ok:
            return
        raise ScrunError(f"refusing {what} {path}: it does not exist") from None
    except OSError as exc:
        raise ScrunError(f"cannot use {what} {path}: {reason(exc)}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise ScrunError(f"refusing {what} {path}: it is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise ScrunError(f"refusing {what} {path}: it is not a directory")
    if info.st_uid != os.geteuid() and not real_root():
        raise ScrunError(
            f"refusing {what} {path}: it belongs to {_owner_name(info.st_uid)}, not to you"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ScrunError(
            f"refusing {what} {path}: it is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}; it should be 0700)"
        )


def check_job_owner(job_id: int, record: Mapping[str, str]) -> None:
    """A container may run only in the caller's own job (`-e SLURM_JOB_ID=N`): never stage
    into, signal or add steps to someone else's. `UserId` in scontrol's record is
    `name(uid)`."""
    user = record.get("UserId", "")
    uid_text = user[user.rfind("(") + 1 : -1] if user.endswith(")") else ""
    if not uid_text.isdigit():
        raise ScrunError(f"cannot tell who owns job {job_id} (UserId={user!r})")
    uid = real_ids()[0]
    if int(uid_text) != uid and uid != 0:
        raise ScrunError(f"job {job_id} belongs to {user}, not to you: use one of your own jobs")


def restrict_umask() -> None:
    """Nothing scrun makes (state, logs, pid files, staged copies) is writable by group or
    others, whatever umask the caller left."""
    os.umask(os.umask(0o077) | 0o022)
