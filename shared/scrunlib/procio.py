"""A container process's plumbing towards the client, for the anchor (the container's first
process) and `scrun exec` (another one): the console socket's pty and the stdio of the
srun that runs the process.
"""

from __future__ import annotations

import os

from scrunlib.errors import ScrunError, reason

TYPE_CHECKING = False
if TYPE_CHECKING:
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
