"""What every test run says first: the versions it runs against (Slurm, podman, crun,
docker, Python). A platform whose packages move (Debian testing) is then read off the log,
not guessed from a failure."""

from __future__ import annotations

import platform
import subprocess

import pytest
from scrunlib import log

# (name, argv...): the first line of the first command that answers is shown as it comes
# (srun --version needs a slurm.conf on some releases: without the cluster's, the package's)
VERSION_COMMANDS: tuple[tuple[str, list[list[str]]], ...] = (
    (
        "slurm",
        [["srun", "--version"], ["dpkg-query", "-W", "-f=slurm-client ${Version}", "slurm-client"]],
    ),
    ("podman", [["podman", "--version"]]),
    ("crun", [["crun", "--version"]]),
    ("docker", [["/usr/bin/docker", "--version"]]),
    ("dockerd", [["dockerd", "--version"]]),
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


def first_version(argvs: list[list[str]]) -> str:
    """The answer of the first command that has one, else the last one's reason."""
    answer = ""
    for argv in argvs:
        answer = tool_version(argv)
        if not answer.startswith("unavailable ("):
            break
    return answer


def pytest_report_header(config: pytest.Config) -> list[str]:
    versions = [f"{name}: {first_version(argvs)}" for name, argvs in VERSION_COMMANDS]
    return ["versions: " + "; ".join([*versions, f"python: {platform.python_version()}"])]


@pytest.fixture(autouse=True)
def default_logging():
    """Each test leaves scrun's default logging behind, as each scrun process starts with it
    (tests call the commands' mains in this process, which configure it)."""
    yield
    log.configure(log.LogSettings())
