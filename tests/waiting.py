"""The tests' one way to wait for something the code does, unit and integration alike
(imported as `waiting`: pytest puts tests/ on sys.path for tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    what: str,
    probe: Callable[[], Any],
    timeout: float = 30.0,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll `probe` until it returns something true, and return that; fail the test after
    `timeout` seconds, with `describe()` when given. The pause between probes grows from
    10 ms to 100 ms: a quick change is seen at once, a slow probe (a Slurm query) is not
    repeated often."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f": {describe()}" if describe else ""
            pytest.fail(f"{what} not seen within {timeout:.0f}s{detail}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
