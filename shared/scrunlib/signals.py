"""Signal numbers and `set_handler` for the paths podman waits on, without the `signal` module:
it is `_signal` (built into the interpreter, loaded at its start) plus enums of the same
numbers, and enum is kept off those paths (lint_tree/hotpath.py). Modules that name signals
for people (signal.Signals) import `signal` where they need it.

`defer`, `restore` and `wait_for_signal`: a wrapper that must not die of a signal while it
prepares (a node's scrun-cdi-run: slurmstepd signals the step's task, `podman stop`) makes
every signal wait, and hands them to its program (scrunlib.processes.hand_over)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # the type checker knows them by their public home
    import signal as _signal
else:
    import _signal

SIGCHLD = _signal.SIGCHLD
SIGCONT = _signal.SIGCONT
SIGINT = _signal.SIGINT
SIGKILL = _signal.SIGKILL
SIGPIPE = _signal.SIGPIPE
SIGRTMAX = _signal.SIGRTMAX
SIGSTOP = _signal.SIGSTOP
SIGTERM = _signal.SIGTERM
SIGXFSZ = _signal.SIGXFSZ
SIG_DFL = _signal.SIG_DFL
set_handler = _signal.signal

__all__ = [
    "SIGCHLD",
    "SIGCONT",
    "SIGINT",
    "SIGKILL",
    "SIGPIPE",
    "SIGRTMAX",
    "SIGSTOP",
    "SIGTERM",
    "SIGXFSZ",
    "SIG_DFL",
    "defer",
    "die_of",
    "restore",
    "set_handler",
    "wait_for_signal",
]


def defer() -> set[int]:
    """Block every signal that can be blocked: from now on each one that comes waits,
    pending, instead of acting. Returns the mask before, for `restore`."""
    return set(_signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals()))


def restore(mask: set[int]) -> None:
    """Make `mask` (what `defer` returned) the blocked set again: what waited acts now."""
    _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def wait_for_signal() -> int:
    """The next signal that comes, or the first that waits, taken (one blocked by `defer`:
    any other would act instead)."""
    return _signal.sigwait(_signal.valid_signals())


def die_of(signum: int) -> None:
    """Meet `signum`'s default action, unblocked: a wrapper ends as its program ended.
    Returns only when that action does not end a process."""
    try:  # noqa: SIM105
        set_handler(signum, SIG_DFL)
    except (OSError, ValueError):  # SIGKILL's and SIGSTOP's cannot be set, nor need be
        pass
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
