"""Starting and waiting for a child process without the subprocess module, for the one child
that `scrun create` waits for: the salloc that holds the container's job.

`import subprocess` brings locale, re, threading, selectors, signal and enum: ~9 ms of
every create on this path. os.posix_spawn starts the program, the child's pidfd tells when
it has ended, waitpid reaps it; that is all the anchor needs of salloc. `ends_within` is
that pidfd wait for any process (`scrun delete` waits so for an anchor, conmon's child).
"""

from __future__ import annotations

import os

from scrunlib.signals import SIGPIPE, SIGXFSZ

# Python ignores these two and a spawned program would inherit that: give it the defaults
# back, as subprocess does (restore_signals).
_RESTORED_SIGNALS = (SIGPIPE, SIGXFSZ)


class Child:
    """A process we started: wait for it (bounded), signal its session."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None  # as subprocess's: -N for signal N
        self._pidfd = os.pidfd_open(pid)  # closed once it is reaped (returncode set)

    def poll(self) -> int | None:
        """Its exit code once it has ended, else None (without waiting)."""
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code, or None when it is still running after `timeout` seconds (None:
        wait as long as it takes)."""
        if self.returncode is not None:
            return self.returncode
        if timeout is not None and not ends_within(self._pidfd, timeout):
            return None
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        os.close(self._pidfd)
        return self.returncode

    def signal_group(self, signum: int) -> None:
        """Signal its process group (it leads one: spawned with new_session)."""
        if self.returncode is None:
            try:  # noqa: SIM105
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass


def ends_within(pidfd: int, timeout: float) -> bool:
    """Whether the process behind `pidfd` ends within `timeout` seconds: a pidfd becomes
    readable the moment its process exits, so nothing polls at an interval."""
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def spawn(
    argv: list[str],
    env: dict[str, str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    new_session: bool = False,
) -> Child:
    """Start `argv[0]` (a path: no PATH search) with exactly `env`, the given fds as its
    stdin, stdout and stderr, and none other of ours. Raises OSError when it cannot be
    run."""
    _keep_fds_to_ourselves()
    pid = os.posix_spawn(
        argv[0],
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
        ],
        setsid=new_session,
        setsigdef=_RESTORED_SIGNALS,
    )
    return Child(pid)


def _keep_fds_to_ourselves() -> None:
    """posix_spawn passes on every fd not marked close-on-exec. Python's own are marked; an
    fd we inherited (podman's and conmon's sync pipes, say) is not, and a salloc holding
    it open for the container's life could keep our caller waiting."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:  # noqa: SIM105 (the listing's own fd is closed by now)
                os.set_inheritable(fd, False)
            except OSError:
                pass
