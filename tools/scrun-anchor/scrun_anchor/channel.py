"""The one channel from the anchor to the user: the container's stderr, or its terminal.

podman and docker show the container's stderr (or terminal) to the user; the anchor's log
lines go to the logs instead. What the user must read there (a queued job's notices, why
the container could not start or run) is said through `ContainerStderr.say`, nowhere else.
At first that is fd 2, which the anchor shares with the container; once a container with a
console socket's terminal is served, the anchor's own stdio becomes the null device and the
channel writes to (a copy of) that terminal instead.

scrun.lua's notices (a long first import, scrunlib.lua.commands) may come while `create`
still waits for the stage-in: podman and docker listen to the container's stderr only once
they start it (what it says before goes to their log alone), so the channel holds them until
then, and `create` goes on without waiting for the rest of the stage-in.
"""

from __future__ import annotations

import os
from _thread import allocate_lock  # (threading is not on the anchor's path)

from scrunlib import log


class ContainerStderr:
    """Where lines for the user go: the container's stderr, or its terminal (`use`)."""

    def __init__(self) -> None:
        self._fd = 2
        self._held: list[str] | None = []  # notices, until the engine listens
        self._lock = allocate_lock()  # (notices come from the stage-in's thread)

    def use(self, terminal: int) -> None:
        """From now on write to `terminal` (the console socket's pty; a copy of it, which
        this channel owns)."""
        self._fd = os.dup(terminal)

    def notice(self, line: str) -> None:
        """A notice of scrun.lua's commands: said now if the engine listens, else held (in
        the order they came: said under the lock that `listened` says the held ones under)."""
        with self._lock:
            if self._held is not None:
                self._held.append(line)
            else:
                self.say(line)

    @property
    def holding(self) -> bool:
        """Whether notices wait for the engine to listen."""
        return bool(self._held)

    def listened(self) -> None:
        """The engine listens from now on (it starts the container): the held notices said,
        under the lock, so that a notice coming meanwhile follows them."""
        with self._lock:
            for line in self._held or []:
                self.say(line)
            self._held = None

    def say(self, line: str) -> None:
        """One line to the user."""
        try:
            os.write(self._fd, f"{line}\n".encode(errors="backslashreplace"))
        except OSError as exc:  # nobody reads the container's stderr any more
            log.verbose(f"could not tell the container's stderr: {exc}")
