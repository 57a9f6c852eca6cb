"""Slurm release numbers: what the runtime checks options and flags against.

Without even `re` (this is on every create's path), so that the option table and the job
environment can ask "is this Slurm new enough?" cheaply.
"""

from __future__ import annotations

from scrunlib.errors import SlurmError

SlurmVersion = tuple[int, int, int]
# The first release whose srun has --container-id (and exports SLURM_CONTAINER_ID).
CONTAINER_ID_SINCE: SlurmVersion = (23, 2, 0)
# The first release whose slurmstepd passes `srun --pty` on to the runtime as
# process.terminal (22.05 forces it false and the task's own pty is the container's stdio).
RUNTIME_TERMINAL_SINCE: SlurmVersion = (23, 2, 0)


def parse_version(text: str) -> SlurmVersion:
    """`slurm 22.05.8` (srun --version) → (22, 5, 8)."""
    # the first N.N.N in the text, wherever it stands (`slurm-wlm 24.11.5-1` too)
    numbers_and_dots = "".join(char if char in "0123456789." else " " for char in text)
    for chunk in numbers_and_dots.split():
        parts = chunk.split(".")
        for first in range(len(parts) - 2):
            if all(parts[first : first + 3]):
                major, minor, micro = (int(part) for part in parts[first : first + 3])
                return major, minor, micro
    raise SlurmError(f"cannot tell the Slurm version from {text.strip()!r}")


def version_string(version: SlurmVersion) -> str:
    """(22, 5, 8) → "22.05.8", the form srun --version prints (and the version cache holds)."""
    major, minor, micro = version
    return f"{major}.{minor:02d}.{micro}"


def version_text(version: SlurmVersion) -> str:
    """(23, 2, 0) → "23.02", (22, 5, 8) → "22.05.8": how Slurm names its releases."""
    major, minor, micro = version
    return f"{major}.{minor:02d}" + (f".{micro}" if micro else "")


def supports_container_id(version: SlurmVersion) -> bool:
    return version >= CONTAINER_ID_SINCE


def runtime_makes_terminal(version: SlurmVersion) -> bool:
    """True when the node's runtime makes the container's pty itself (`srun --pty`)."""
    return version >= RUNTIME_TERMINAL_SINCE
