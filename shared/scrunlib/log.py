"""Logging for every scrun tool: Slurm-style levels, several outputs, loguru behind it.

Levels are Slurm's (`quiet fatal error info verbose debug debug2..debug5`, 0..9). Each output
(stderr, syslog, the `--log` file, an extra text file such as the anchor's log in its spool
directory) has its own threshold and its own writer here.

At the default levels a command writes at most a few lines (the error that ends it, an
"ignoring unknown variable" note, a stop request): those are written straight to the
outputs, because importing loguru (asyncio, 40-75 ms) would cost more than the command
itself. Once an output asks for verbose or debug lines (`-v`, `--debug`, SCRUN_*DEBUG),
loguru carries every line to the same writers, configured on the first line written.
"""

from __future__ import annotations

import os
import sys

from scrunlib.errors import InvalidInput, reason

# typing, dataclasses, datetime, collections and contextlib cost milliseconds per call
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime
    from typing import Any, TextIO

    Writer = Callable[[Mapping[str, Any]], None]

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
    ) -> None:
        self.stderr, self.syslog, self.file = stderr, syslog, file
        self.log_file, self.log_format = log_file, log_format
        self.extra_file, self.extra_level = extra_file, extra_level
        self.program, self.stderr_stream = program, stderr_stream

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

    def as_args(self) -> list[str]:
        """Command-line form, so a child tool (the anchor) logs exactly like its parent."""
        args = [
            f"--stderr-level={self.stderr}",
            f"--syslog-level={self.syslog}",
            f"--file-level={self.file}",
            f"--log-format={self.log_format}",
        ]
        if self.log_file:
            args.append(f"--log={self.log_file}")
        return args

    @property
    def threshold(self) -> int:
        levels = [self.stderr, self.syslog]
        if self.log_file:
            levels.append(self.file)
        if self.extra_file:
            levels.append(self.extra_level)
        return max(levels)


_settings = LogSettings()
_logger: Any = None  # loguru's logger, once configured
_writers: list[tuple[int, Writer]] | None = None  # the outputs' writers, once made


def configure(settings: LogSettings) -> None:
    """Install `settings`. The --log file is created at once: clients expect it to exist."""
    global _settings, _logger, _writers
    _settings = settings
    _logger = _writers = None
    if settings.log_file:
        try:
            with open(settings.log_file, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            _settings.log_file = None
            raise InvalidInput(f"cannot open log file {settings.log_file}: {reason(exc)}") from exc


def settings() -> LogSettings:
    return _settings


def log(level: int, message: str) -> None:
    """Write `message` at Slurm `level` to every output whose threshold admits it."""
    if not 0 < level <= _settings.threshold:
        return
    if _settings.threshold < VERBOSE:  # the default levels: a few lines, no loguru
        from datetime import datetime

        record = {"extra": {"slurm_level": level}, "message": message, "time": datetime.now()}
        for threshold, write in _outputs():
            if level <= threshold:
                write(record)
        return
    # bind(), not a keyword: loguru would str.format() the message and choke on braces.
    _loguru().bind(slurm_level=level).log(LEVEL_NAMES[level].upper(), message)


def error(message: str) -> None:
    log(ERROR, message)


def info(message: str) -> None:
    log(INFO, message)


def verbose(message: str) -> None:
    log(VERBOSE, message)


def debug(message: str, depth: int = 1) -> None:
    """Debug line; `depth` 1..5 selects debug..debug5."""
    log(DEBUG + min(max(depth, 1), 5) - 1, message)


def _rfc3339(moment: datetime) -> str:
    from datetime import UTC

    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_line(record: Mapping[str, Any]) -> str:
    from scrunlib import leanjson

    level = record["extra"]["slurm_level"]
    entry = {
        "level": _RUNC_LEVEL.get(level, "debug"),
        "msg": record["message"],
        "time": _rfc3339(record["time"]),
    }
    return leanjson.dumps(entry) + "\n"


def _text_line(record: Mapping[str, Any]) -> str:
    level = LEVEL_NAMES[record["extra"]["slurm_level"]]
    stamp = _rfc3339(record["time"])
    return f"{stamp} {_settings.program}[{os.getpid()}]: {level}: {record['message']}\n"


def _stderr_line(record: Mapping[str, Any]) -> str:
    level = LEVEL_NAMES[record["extra"]["slurm_level"]]
    prefix = "" if level == "info" else f"{level}: "
    return f"{_settings.program}: {prefix}{record['message']}\n"


def _outputs() -> list[tuple[int, Writer]]:
    """(threshold, writer) of each output the settings turn on, made once per `configure`; a
    writer takes a record with loguru's keys `message`, `time` (a datetime) and
    `extra["slurm_level"]`."""
    global _writers
    if _writers is not None:
        return _writers
    s = _settings
    outputs: list[tuple[int, Writer]] = []
    if s.stderr:

        def to_stderr(record: Mapping[str, Any]) -> None:
            stream = s.stderr_stream or sys.stderr  # looked up late: tests swap sys.stderr
            stream.write(_stderr_line(record))
            stream.flush()

        outputs.append((s.stderr, to_stderr))
    if s.log_file and s.file:
        render = _json_line if s.log_format == "json" else _text_line
        outputs.append((s.file, _append(s.log_file, render)))
    if s.extra_file and s.extra_level:
        outputs.append((s.extra_level, _append(s.extra_file, _text_line)))
    if s.syslog and os.path.exists("/dev/log"):
        outputs.append((s.syslog, _to_syslog(s.program)))
    _writers = outputs
    return outputs


def _append(path: str, render: Callable[[Mapping[str, Any]], str]) -> Writer:
    def write(record: Mapping[str, Any]) -> None:
        try:
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as stream:
                stream.write(render(record))
        except OSError:
            pass  # a vanished log file must never turn success into failure

    return write


# syslog priorities (<syslog.h>) of Slurm's levels: fatal crit, error err, info info, the rest debug
_SYSLOG_PRIORITY = {FATAL: 2, ERROR: 3, INFO: 6}


def _to_syslog(program: str) -> Writer:
    import syslog

    syslog.openlog(program, syslog.LOG_PID, syslog.LOG_USER)

    def write(record: Mapping[str, Any]) -> None:
        level = record["extra"]["slurm_level"]
        syslog.syslog(_SYSLOG_PRIORITY.get(level, 7), record["message"])

    return write


def _loguru() -> Any:
    """Configure loguru on first use: every output of `_outputs` as a sink."""
    global _logger
    if _logger is not None:
        return _logger
    import contextlib

    from loguru import logger

    logger.remove()
    for name, number in LEVELS.items():
        if number == 0:
            continue
        with contextlib.suppress(TypeError, ValueError):  # ERROR, INFO, DEBUG already exist
            logger.level(name.upper(), no=60 - number * 5)

    for threshold, write in _outputs():

        def sink(message: Any, write: Writer = write) -> None:
            write(message.record)

        def admits(record: Any, threshold: int = threshold) -> bool:
            return bool(0 < record["extra"].get("slurm_level", 99) <= threshold)

        logger.add(sink, level=0, filter=admits, format="{message}")
    _logger = logger
    return logger
