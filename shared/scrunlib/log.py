"""Logging for every scrun tool: Slurm-style levels, several outputs, one formatter.

Levels are Slurm's (`quiet fatal error info verbose debug debug2..debug5`, 0..9). Each output
(stderr, syslog, the `--log` file, an extra text file such as the anchor's log in its spool
directory) has its own threshold; `configure` sets them, and every line, at every level and
in every process, goes through `format_line` to the outputs that admit it.

The engine is this module, not loguru: loguru would only carry lines to these same outputs,
whose formats are fixed by their readers (runc's JSON log for podman and containerd, syslog,
the text of the anchor's log), and importing it takes longer than a whole `scrun state`
(the README's "Libraries" has the figures); at debug level every create and its anchor
would pay that, and so would `scrun state`. The admin tools, which no engine waits for,
hand their stderr lines to loguru instead (`stderr_sink`, scrunlib.admin_output).
"""

from __future__ import annotations

import os
import sys
import time

from scrunlib.errors import InvalidInput, reason
from scrunlib.pidns import own_pid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TextIO

    Write = Callable[[int, str], None]  # (level, formatted line)

LEVELS: dict[str, int] = {
    "quiet": 0,
    "fatal": 1,
    "error": 2,
    "info": 3,
    "verbose": 4,
    "debug": 5,
    "debug2": 6,
    "debug3": 7,
    "debug4": 8,
    "debug5": 9,
}
LEVEL_NAMES = {number: name for name, number in LEVELS.items()}
FATAL, ERROR, INFO, VERBOSE, DEBUG = 1, 2, 3, 4, 5
SYSLOG_SOCKET = "/dev/log"  # where syslog(3) writes; without it, no syslog output
# runc's JSON log has only these level names; containerd and podman read them.
_RUNC_LEVEL = {1: "error", 2: "error", 3: "info", 4: "info"}
# Order matters: later variables override earlier ones (as upstream).
ENV_VARIABLES = ("SCRUN_DEBUG", "SCRUN_STDERR_DEBUG", "SCRUN_SYSLOG_DEBUG", "SCRUN_FILE_DEBUG")


def parse_level(value: str, source: str) -> int:
    """Turn a level name or number into 0..9; `source` names the variable or option for errors."""
    text = value.strip().lower()
    if text.isdigit() and int(text) in LEVEL_NAMES:
        return int(text)
    if text in LEVELS:
        return LEVELS[text]
    names = "|".join(LEVELS)
    raise InvalidInput(f"invalid log level {source}={value!r}: expected one of {names}")


class LogSettings:
    """Thresholds per output, plus where the `--log` file is and its format.

    `file` is the --log file's level: by default only the error that ends a failed command
    goes there (podman reads that file as one JSON object). `extra_file` is a text log of
    its own, such as the anchor's in its spool directory."""

    def __init__(
        self,
        *,
        stderr: int = INFO,
        syslog: int = 0,
        file: int = ERROR,
        log_file: str | None = None,
        log_format: str = "json",
        extra_file: str | None = None,
        extra_level: int = 0,
        program: str = "scrun",
        stderr_stream: TextIO | None = None,
        stderr_sink: Write | None = None,
    ) -> None:
        self.stderr, self.syslog, self.file = stderr, syslog, file
        self.log_file, self.log_format = log_file, log_format
        self.extra_file, self.extra_level = extra_file, extra_level
        self.program, self.stderr_stream = program, stderr_stream
        # (level, message) of each stderr line, for a writer that formats it itself
        self.stderr_sink = stderr_sink

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> LogSettings:
        """Apply SCRUN_DEBUG, SCRUN_STDERR_DEBUG, SCRUN_SYSLOG_DEBUG and SCRUN_FILE_DEBUG."""
        settings = cls(**overrides)
        for name in ENV_VARIABLES:
            raw = environ.get(name)
            if raw is None or raw == "":
                continue
            level = parse_level(raw, name)
            if name in ("SCRUN_DEBUG", "SCRUN_STDERR_DEBUG"):
                settings.stderr = level
            if name in ("SCRUN_DEBUG", "SCRUN_SYSLOG_DEBUG"):
                settings.syslog = level
            if name in ("SCRUN_DEBUG", "SCRUN_FILE_DEBUG"):
                settings.file = max(level, FATAL)
        return settings

    @property
    def threshold(self) -> int:
        levels = [self.stderr, self.syslog]
        if self.log_file:
            levels.append(self.file)
        if self.extra_file:
            levels.append(self.extra_level)
        return max(levels)


class Output:
    """One place lines go: its threshold, the format_line style and the writer."""

    __slots__ = ("style", "threshold", "write")

    def __init__(self, threshold: int, style: str, write: Write) -> None:
        self.threshold, self.style, self.write = threshold, style, write


_settings = LogSettings()
_outputs: list[Output] | None = None  # made from _settings on the first line written


def configure(settings: LogSettings) -> None:
    """Install `settings`, once per process. The --log file is created at once: clients
    expect it to exist."""
    global _settings, _outputs
    _settings = settings
    _outputs = None
    if settings.log_file:
        open_log_file(settings.log_file)


def open_log_file(path: str) -> None:
    """Turn on the --log file output, at the level the settings give it (the anchor, once
    `created` is reported), creating the file."""
    global _outputs
    _settings.log_file = None
    _outputs = None
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise InvalidInput(f"cannot open log file {path}: {reason(exc)}") from exc
    _settings.log_file = path


def settings() -> LogSettings:
    return _settings


def log(level: int, message: str) -> None:
    """Write `message` at Slurm `level` to every output whose threshold admits it."""
    if not 0 < level <= _settings.threshold:
        return
    moment = time.time()
    for output in _outputs if _outputs is not None else _make_outputs():
        if level <= output.threshold:
            output.write(level, format_line(output.style, level, message, moment))


def error(message: str) -> None:
    log(ERROR, message)


def info(message: str) -> None:
    log(INFO, message)


def verbose(message: str) -> None:
    log(VERBOSE, message)


def debug(message: str, depth: int = 1) -> None:
    """Debug line; `depth` 1..5 selects debug..debug5."""
    log(DEBUG + min(max(depth, 1), 5) - 1, message)


def format_line(style: str, level: int, message: str, moment: float) -> str:
    """The one formatter: `message` at `level`, written at `moment` (time.time()), as the
    output `style` shows it. stderr: `scrun: error: ...` (no level for info), what a person
    at a terminal reads; text: RFC 3339 time, program[pid], level (the anchor's log, the
    `--log-format=text` file); json: runc's log object, which podman and containerd parse;
    syslog and sink: the message alone (syslog adds time, program and pid; a stderr_sink
    formats it itself)."""
    name = LEVEL_NAMES[level]
    if style == "stderr":
        return f"{_settings.program}: {'' if level == INFO else name + ': '}{message}\n"
    if style in ("syslog", "sink"):
        return message
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment))
    stamp += f".{int(moment % 1 * 1_000_000):06d}Z"
    if style == "json":
        from scrunlib import leanjson

        entry = {"level": _RUNC_LEVEL.get(level, "debug"), "msg": message, "time": stamp}
        return leanjson.dumps(entry) + "\n"
    return f"{stamp} {_settings.program}[{own_pid()}]: {name}: {message}\n"


def _make_outputs() -> list[Output]:
    """The outputs the settings turn on, made once per `configure`."""
    global _outputs
    s = _settings
    outputs: list[Output] = []
    if s.stderr and s.stderr_sink:
        outputs.append(Output(s.stderr, "sink", s.stderr_sink))
    elif s.stderr:

        def to_stderr(level: int, line: str) -> None:
            stream = s.stderr_stream or sys.stderr  # looked up late: tests swap sys.stderr
            stream.write(line)
            stream.flush()

        outputs.append(Output(s.stderr, "stderr", to_stderr))
    if s.log_file and s.file:
        style = "json" if s.log_format == "json" else "text"
        outputs.append(Output(s.file, style, _append(s.log_file)))
    if s.extra_file and s.extra_level:
        outputs.append(Output(s.extra_level, "text", _append(s.extra_file)))
    if s.syslog and os.path.exists(SYSLOG_SOCKET):
        outputs.append(Output(s.syslog, "syslog", _to_syslog(s.program)))
    _outputs = outputs
    return outputs


def _append(path: str) -> Write:
    def write(level: int, line: str) -> None:
        try:
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as stream:
                stream.write(line)
        except OSError:
            pass  # a vanished log file must never turn success into failure

    return write


# syslog priorities (<syslog.h>) of Slurm's levels: fatal crit, error err, info info, the rest debug
_SYSLOG_PRIORITY = {FATAL: 2, ERROR: 3, INFO: 6}


def _to_syslog(program: str) -> Write:
    import syslog

    syslog.openlog(program, syslog.LOG_PID, syslog.LOG_USER)

    def write(level: int, line: str) -> None:
        syslog.syslog(_SYSLOG_PRIORITY.get(level, 7), line)

    return write
