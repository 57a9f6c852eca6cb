"""A container process's plumbing towards the client, for the anchor (the container's first
process) and `scrun exec` (another one): the console socket's pty and the stdio of the
srun that runs the process.
"""

from __future__ import annotations

import os

from scrunlib.errors import ScrunError, reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def send_console(console_socket: str) -> int:
    """Make a pty, hand its master to the caller's console socket (one byte + SCM_RIGHTS,
    as crun does) and return the slave, which becomes the process's stdio. (Imports here:
    only a container with a terminal pays for them.)"""
    import socket
    import tty

    master, slave = os.openpty()
    # Raw: the terminal discipline that counts is the one of the pty slurmstepd makes for
    # `srun --pty`; ours must pass bytes through untouched (no second echo, no CR/LF
    # translation).
    tty.setraw(slave)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(console_socket)
            socket.send_fds(conn, [b" "], [master])
    except OSError as exc:
        os.close(slave)
        raise ScrunError(f"cannot use console socket {console_socket}: {reason(exc)}") from exc
    finally:
        os.close(master)
    return slave


# Run before `srun --pty` on a new terminal: wait (2 s at most) while the terminal has no
# size yet, then become srun ("$@"). An engine whose client has no terminal never sizes it,
# and its process waits the whole bound. podman's size is there at once (0 turns in 12
# `podman exec -it` under load); a process that finds no size in the container despite it
# met crun's own race (exec_process's docstring), not this bound.
_WHEN_SIZED = (
    'i=0; while [ "$(stty size 2>/dev/null)" = "0 0" ] && [ $i -lt 100 ]; '
    'do i=$((i+1)); sleep 0.02; done; exec "$@"'
)


def when_sized(argv: Sequence[str]) -> list[str]:
    """`argv` (an `srun --pty` on the console socket's pty), started once the engine has
    given that terminal its window size: same pid, no wait for the caller.

    srun's pty thread gives up on its terminal for good ("pty: accept failure: Interrupted
    system call": no window size and no resize reach the step) when a SIGWINCH arrives
    before slurmstepd has connected back to it, which is just when an engine sets the size
    of a new terminal; docker's shim does it only once `exec` or `start` has returned."""
    return ["/bin/sh", "-c", _WHEN_SIZED, "sh", *argv]


def srun_stdio(pty_slave: int | None) -> dict[str, Any]:
    """subprocess arguments for srun: our stdio, or the pty slave as its controlling
    terminal (srun --pty needs one)."""
    if pty_slave is None:
        return {"stdin": 0, "stdout": 1, "stderr": 2}

    import fcntl
    import termios

    def controlling_tty() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    return {
        "stdin": pty_slave,
        "stdout": pty_slave,
        "stderr": pty_slave,
        "start_new_session": True,
        "preexec_fn": controlling_tty,
    }


def detach_stdio() -> None:
    """Our stdin, stdout and stderr become the null device: whoever reads our output until
    every copy of it is closed (podman, conmon) is not kept waiting by us."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
