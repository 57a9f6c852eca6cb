"""The one channel from the anchor to the user: the container's stderr, or its terminal.

podman and docker show the container's stderr (or terminal) to the user; the anchor's log
lines go to the logs instead. What the user must read there (a queued job's notices, why
the container could not start or run) is said through `ContainerStderr.say`, nowhere else.
At first that is fd 2, which the anchor shares with the container; once a container with a
console socket's terminal is served, the anchor's own stdio becomes the null device and the
channel writes to (a copy of) that terminal instead.
"""

from __future__ import annotations

import os

from scrunlib import log


class ContainerStderr:
    """Where lines for the user go: the container's stderr, or its terminal (`use`)."""

    def __init__(self) -> None:
        self._fd = 2

    def use(self, terminal: int) -> None:
        """From now on write to `terminal` (the console socket's pty; a copy of it, which
        this channel owns)."""
        self._fd = os.dup(terminal)

    def say(self, line: str) -> None:
        """One line to the user."""
        try:
            os.write(self._fd, f"{line}\n".encode(errors="backslashreplace"))
        except OSError as exc:  # nobody reads the container's stderr any more
            log.verbose(f"could not tell the container's stderr: {exc}")
