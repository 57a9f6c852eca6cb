"""A container process's plumbing towards the client, for the anchor (the container's first
process) and `scrun exec` (another one): the console socket's pty and the stdio of the
srun that runs the process.
"""

from __future__ import annotations

import os

from scrunlib.errors import ScrunError, reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
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


# Seconds a process with a terminal waits, before its srun starts, for the engine to set
# the terminal's window size (see start_on_terminal).
SIZE_WAIT = 2.0


def start_on_terminal(argv: Sequence[str], env: Mapping[str, str], pty_slave: int) -> int:
    """Start `argv` (an `srun --pty`) with `pty_slave` as its controlling terminal and stdio,
    once the engine has given that terminal its window size (SIZE_WAIT s at most); return
    its pid at once.

    srun's pty thread gives up on its terminal for good ("pty: accept failure: Interrupted
    system call": no window size and no resize reach the step) when a SIGWINCH arrives
    before slurmstepd has connected back to it, which is just when an engine sets the size
    of a new terminal: docker's shim does it once `exec` has returned, so the wait is the
    child's, before it becomes srun, and the caller does not wait for it."""
    import fcntl
    import struct
    import termios
    import time

    pid = os.fork()
    if pid != 0:
        return pid
    try:  # the child: only os-level calls, then exec or _exit
        os.setsid()
        fcntl.ioctl(pty_slave, termios.TIOCSCTTY, 0)
        for fd in (0, 1, 2):
            os.dup2(pty_slave, fd)
        if pty_slave > 2:
            os.close(pty_slave)
        empty = struct.pack("HHHH", 0, 0, 0, 0)
        deadline = time.monotonic() + SIZE_WAIT
        while time.monotonic() < deadline:
            size = fcntl.ioctl(0, termios.TIOCGWINSZ, empty)
            if size[:4] != empty[:4]:
                break
            time.sleep(0.02)
        os.execvpe(argv[0], list(argv), dict(env))
    except OSError as exc:
        os.write(2, f"scrun: error: cannot run {argv[0]}: {reason(exc)}\r\n".encode())
    finally:  # nothing may return from the child
        os._exit(127)


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
