"""What every test run says first: the versions it runs against (Slurm, podman, crun,
docker, Python). A platform whose packages move (Debian testing) is then read off the log,
not guessed from a failure."""

from __future__ import annotations

import platform
import subprocess

import pytest

# (name, argv): the first line of each command's answer is shown as it comes
VERSION_COMMANDS = (
    ("slurm", ["srun", "--version"]),
    ("podman", ["podman", "--version"]),
    ("crun", ["crun", "--version"]),
    ("docker", ["/usr/bin/docker", "--version"]),
    ("dockerd", ["dockerd", "--version"]),
)


def tool_version(argv: list[str]) -> str:
    """The first line of `argv`'s output, or why there is none (never raises: a missing
    tool is for the tests that need it to report)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({e.__class__.__name__})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    first = lines[0] if lines else ""
    return first if done.returncode == 0 else f"unavailable (exit {done.returncode}: {first})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    versions = [f"{name}: {tool_version(argv)}" for name, argv in VERSION_COMMANDS]
    return ["versions: " + "; ".join([*versions, f"python: {platform.python_version()}"])]
