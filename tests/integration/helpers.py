"""Small helpers shared by the integration tests (imported as `helpers`: pytest puts this
folder on sys.path, as it has no __init__.py)."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


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


def cmdline(pid: int | str) -> list[str] | None:
    """A process's argv; None when it is gone (or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def from_other_checkout(argv: list[str]) -> bool:
    """A process started from another checkout's venv: several checkouts (each with its own
    cluster) may run their suites on one machine at once, sharing the default spool roots;
    what their containers leave is theirs to check."""
    return not any(str(REPO) in arg for arg in argv[:3])


def is_this_checkouts_anchor(argv: list[str]) -> bool:
    """An anchor of this checkout: a forked `scrun create` (`[python] .../scrun [OPTIONS]
    create ...`), or the `scrun-anchor` command run by hand."""
    if from_other_checkout(argv):
        return False
    program = [os.path.basename(arg) for arg in argv[:2]]
    return "scrun-anchor" in program or ("scrun" in program and "create" in argv)
