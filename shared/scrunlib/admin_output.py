"""The admin tools' stderr (scrun-stage, scrun-lua-check), written by loguru.

A site admin runs these tools at a terminal, and no engine waits for them: loguru writes
their log lines (scrunlib.log's, with `-v`) and their errors, in the runtime's line shape
(`PROGRAM: LEVEL: message`, no level for info; scrunlib.log.format_line's stderr style)
and with Slurm's level names, the level coloured when stderr is a terminal. The reports
the tools print on stdout (text or JSON) are data, rendered by the tools themselves.

Never imported by the runtime (create, start, state, kill, delete, the anchor): its import
cost is the README's ("Libraries"), and lint_tree's hot path rule keeps it off them.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

from loguru import logger

from scrunlib import log

if TYPE_CHECKING:
    from loguru import Record

# loguru orders levels by a number that grows with severity; Slurm's (quiet 0, fatal 1 ...
# debug5 9) grows with detail. fatal is 45 ... debug5 5, between loguru's own (10, 20, ...).
_SEVERITY = {name: 50 - 5 * number for name, number in log.LEVELS.items() if number}
_COLOURS = {"fatal": "<red><bold>", "error": "<red>", "info": "<bold>"}

_program = "scrun"
_handler: int | None = None


def configure(program: str, stderr_level: int) -> None:
    """`program`'s stderr through loguru: scrunlib.log's lines up to `stderr_level`
    (Slurm's numbering; 0: none), and every `error`."""
    global _program
    _program = program
    _install()
    log.configure(log.LogSettings(stderr=stderr_level, program=program, stderr_sink=_write))


def error(program: str, message: str) -> None:
    """`PROGRAM: error: MESSAGE`, whatever the log level (scrunlib.errors.print_error's
    line)."""
    global _program
    _program = program
    _install()
    logger.log("error", message)


def _write(level: int, message: str) -> None:
    logger.log(log.LEVEL_NAMES[level], message)


def _install() -> None:
    """Our handler in place of loguru's default one (its own format, every level), or of
    ours, which the internal-error report (scrunlib.errors) may have removed."""
    global _handler
    if _handler is None:
        for name, severity in _SEVERITY.items():
            logger.level(name, no=severity, color=_COLOURS.get(name, ""))
        logger.remove()
    else:
        with contextlib.suppress(ValueError):  # removed meanwhile
            logger.remove(_handler)
    _handler = logger.add(_to_stderr, level=0, format=_format, colorize=sys.stderr.isatty())


def _format(record: Record) -> str:
    """The line's template, which loguru fills in (it never reads the message as one)."""
    shown = "" if record["level"].name == "info" else "<level>{level}</level>: "
    return f"{_program}: {shown}{{message}}\n"


def _to_stderr(line: str) -> None:
    """sys.stderr looked up at each line: a test may have swapped it."""
    sys.stderr.write(line)
    sys.stderr.flush()
