"""The anchor's own pid namespace and the /proc that shows it, so that `podman top` lists
the container's processes on this host (the anchor, its salloc and srun), not the host's.

podman finds a container's processes through the pid it knows, the anchor's: psgo (its
`top` descriptors) joins that pid's mount namespace and lists that namespace's /proc;
podman >= 5's ps(1) path joins its pid namespace and mounts a /proc there. So `scrun
create` forks the anchor into a new pid namespace (it is pid 1 there, its children are its
namespace's), and the anchor, first thing, makes a mount namespace of its own (mounts
there no longer reach the host's) with a /proc of that pid namespace.

Who may: the host's root, and rootless podman's or docker's uid 0 (the runtime runs in
their user namespace, with its powers, which owns the namespaces made here: podman keeps
the power to join them). Anyone else (scrun run by hand, outside a user namespace) gets
EPERM: the anchor then runs in the host's namespaces, as before.

What being pid 1 changes, and where it is handled:
- os.getpid() is 1: `own_pid()` is the host's pid (the pid file, state.json, SCRUN_PID,
  the log), read before the host's /proc is covered; a child's host pid (the step's srun,
  which `scrun delete` may have to kill) is read through a pidfd's fdinfo in the host's
  /proc, kept open (`host_pid_of_pidfd`).
- only the signals it has a handler for reach it (and SIGKILL, SIGSTOP from the host): the
  anchor handles SIGTERM and SIGINT while it creates the container, and SIGHUP too once
  created; one sent before (`scrun delete` at once) is lost, and delete kills it after its
  delete_timeout.
- when it dies, the kernel kills its salloc and srun: `scrun delete` then ends the step and
  the job through Slurm, as it does for an anchor killed with SIGKILL.
- its namespace's orphans become its children; none of scrun's own commands leaves one
  running (a scrun.lua command that does is reaped when the anchor exits).

Python 3.11 has no os.unshare and no Python has mount(2): both through ctypes, imported
only when the namespace is made (its cost: lint_tree/hotpath.py).
"""

from __future__ import annotations

import os

# <sched.h>, <sys/mount.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_REC, MS_SLAVE = 0x4000, 0x80000

_own: list[int] = []  # [host pid, fd of the host's /proc] once in a namespace of our own


def own_pid() -> int:
    """This process's pid as the host sees it."""
    return _own[0] if _own else os.getpid()


def _libc_call(name: str, *args: object) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _unshare(flags: int) -> None:
    if hasattr(os, "unshare"):  # Python >= 3.12
        os.unshare(flags)
    else:
        _libc_call("unshare", flags)


def new_for_children() -> bool:
    """Put the next child we fork in a new pid namespace (as its pid 1); False when we may
    not (then it is forked into ours). Call it only before the one fork it is meant for:
    once that child has ended, this process cannot fork again."""
    try:
        _unshare(CLONE_NEWPID)
    except OSError:
        return False
    return True


def enter_own_proc() -> None:
    """In pid 1 of a new pid namespace: a mount namespace of our own, which receives the
    host's mounts but sends none back, with a /proc of our pid namespace. Raises OSError
    (then /proc would not show our pids: the caller must not go on)."""
    host_proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    host_pid = int(os.readlink("self", dir_fd=host_proc))
    _unshare(CLONE_NEWNS)
    _libc_call("mount", None, b"/", None, MS_REC | MS_SLAVE, None)
    _libc_call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    _own[:] = [host_pid, host_proc]


def in_own_namespace() -> bool:
    """Whether this process is pid 1 of a namespace of its own (`enter_own_proc`)."""
    return bool(_own)


def host_pid_of_pidfd(pidfd: int) -> int:
    """The host's pid of the process behind `pidfd`, in a namespace of our own: its fdinfo,
    read in the host's /proc, names it in that /proc's namespace (0: it has ended)."""
    fdinfo = os.open(f"self/fdinfo/{pidfd}", os.O_RDONLY, dir_fd=_own[1])
    try:
        text = os.read(fdinfo, 4096).decode()
    finally:
        os.close(fdinfo)
    for line in text.splitlines():
        if line.startswith("Pid:"):
            return max(int(line.split()[1]), 0)  # -1 once it has ended
    return 0


def members(pid: int) -> list[int] | None:
    """Our pids of the processes in the pid namespace of `pid` (an anchor's: it, its salloc
    and srun); None when that namespace is ours (the anchor could not make one: listing it
    would list the whole host) or `pid` has gone."""
    try:
        theirs = os.readlink(f"/proc/{pid}/ns/pid")
        if theirs == os.readlink("/proc/self/ns/pid"):
            return None
    except OSError:
        return None
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == theirs:
                    found.append(int(name))
            except OSError:
                continue  # gone meanwhile, or not ours to look at
    return sorted(found)
