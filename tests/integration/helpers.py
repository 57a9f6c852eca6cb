"""Small helpers shared by the integration tests (imported as `helpers`: pytest puts this
folder on sys.path, as it has no __init__.py)."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any

import pytest

# The Debian 13 root's tests (harness/debian13/ sets it): Slurm 24.11, podman 5.4, docker 26.1.
ON_DEBIAN13 = os.environ.get("SCRUN_PLATFORM") == "debian13"


def wait_for(
    what: str,
    probe: Callable[[], Any],
    timeout: float = 30.0,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll `probe` until it returns something true, and return that; fail the test after
    `timeout` seconds, with `describe()` when given."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f": {describe()}" if describe else ""
            pytest.fail(f"{what} not seen within {timeout:.0f}s{detail}")
        time.sleep(0.1)


def read_terminal(fd: int, until: bytes | None, timeout: float) -> bytes:
    """What a terminal shows, until `until` appears (None: until the other side closes)."""
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (until is None or until not in output):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process on the other side has closed it
            break
        if not chunk:
            break
        output += chunk
    return output


def type_into_terminal(
    argv: list[str], env: dict[str, str], typed: bytes, timeout: float = 60.0
) -> tuple[int, str]:
    """Run `argv` on a new pty as a user would: once it shows a /dev/pts/ name, type
    `typed`; returns its exit code and all it showed."""
    import pty

    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, env)
    try:
        output = read_terminal(terminal, until=b"/dev/pts/", timeout=timeout)
        os.write(terminal, typed)
        output += read_terminal(terminal, until=None, timeout=timeout)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
