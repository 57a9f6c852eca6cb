"""Signal numbers and `set_handler` for the paths podman waits on, without the `signal` module:
it is `_signal` (built into the interpreter, loaded at its start) plus enums of the same
numbers, and enum is kept off those paths (lint_tree/hotpath.py). Modules that name signals
for people (signal.Signals) import `signal` where they need it."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the type checker knows these by their public home
    from signal import SIGCONT, SIGINT, SIGKILL, SIGPIPE, SIGRTMAX, SIGSTOP, SIGTERM, SIGXFSZ
    from signal import signal as set_handler
else:
    from _signal import SIGCONT, SIGINT, SIGKILL, SIGPIPE, SIGRTMAX, SIGSTOP, SIGTERM, SIGXFSZ
    from _signal import signal as set_handler

__all__ = [
    "SIGCONT",
    "SIGINT",
    "SIGKILL",
    "SIGPIPE",
    "SIGRTMAX",
    "SIGSTOP",
    "SIGTERM",
    "SIGXFSZ",
    "set_handler",
]
