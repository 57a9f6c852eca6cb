"""Typed errors: each carries the process exit code and a one-line message for the user.

Commands raise these; the front end turns them into `scrun: error: <message>` on stderr
(and a JSON line in the --log file) and exits with `exit_code`. Nothing else prints errors.
Tools whose logging does not go to stderr print them with `print_error`.
"""

import sys


class ScrunError(Exception):
    """An error the user should see. `exit_code` is what the process exits with."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        # Keep messages on one line: clients (conmon, containerd) show only the first read.
        # An undecodable byte of the input (os.environ's surrogate escapes) is shown as \udcXX:
        # every output (stderr, the log files, create's ready pipe) can then write it.
        one_line = " ".join(message.split())
        super().__init__(one_line.encode("utf-8", "backslashreplace").decode("utf-8"))
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self)


class UsageError(ScrunError):
    """Bad command line: unknown option or command, missing or extra arguments."""

    exit_code = 2


class InvalidInput(ScrunError):
    """Input that is never trusted was rejected: container id, config.json, SCRUN_* values."""


class ContainerNotFound(ScrunError):
    """No container with this id exists under the root (runc's wording)."""

    def __init__(self, container_id: str) -> None:
        super().__init__(f"container {container_id!r} does not exist")


class ContainerExists(ScrunError):
    """`create` with an id that is already in use."""

    def __init__(self, container_id: str) -> None:
        super().__init__(f"container {container_id!r} already exists")


class StateError(ScrunError):
    """The requested operation is not possible in the container's current state."""


class SlurmError(ScrunError):
    """A Slurm command failed or Slurm refused the request."""


class AnchorError(ScrunError):
    """The anchor could not be reached or answered with an error."""


class LuaError(ScrunError):
    """scrun.lua could not be loaded or one of its hooks failed."""


class LuaLoadError(LuaError):
    """scrun.lua could not be loaded: missing, unreadable, a syntax error, a missing hook.
    scrun-stage exits with 3 then (it could not even try the hooks)."""

    exit_code = 3


def print_error(program: str, message: str) -> None:
    """`PROGRAM: error: MESSAGE` on stderr, on one line."""
    sys.stderr.write(f"{program}: error: {message}\n")


def reason(exc: OSError) -> str:
    """Why an OS call failed, worded for users. Never "No such file or directory": podman
    and docker turn that phrase in a runtime's error into "command not found" (exit 127)."""
    import errno

    if exc.errno == errno.ENOENT:
        return "it does not exist"
    return exc.strerror or str(exc)


def internal_error(exc: Exception, *, traceback: bool) -> ScrunError:
    """What a tool's top-level handler reports for an exception that is not a ScrunError:
    that is a bug in scrun, never the user's input, so the user gets one line naming it
    (exit 1), and the traceback goes to stderr only when asked for (`--debug`)."""
    if traceback:
        _report_bug(exc)
    hint = "" if traceback else "; --debug prints the traceback"
    return ScrunError(f"internal error: {type(exc).__name__}: {exc} (a bug in scrun{hint})")


def _report_bug(exc: Exception) -> None:
    """The traceback of a bug, to stderr, by loguru: `diagnose` writes each frame's values
    beside its line, which is what a bug report needs. Imported only here, by a command
    that already failed: its import cost is the README's ("Libraries")."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, format="{message}", backtrace=True, diagnose=True, colorize=False)
    logger.opt(exception=exc).error("internal error, the traceback with its values:")
    logger.remove()
