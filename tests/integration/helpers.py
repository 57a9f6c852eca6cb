"""Small helpers shared by the integration tests (imported as `helpers`: pytest puts this
folder on sys.path, as it has no __init__.py)."""

from __future__ import annotations

import os
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
