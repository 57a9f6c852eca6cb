"""Settings from a `[tool.scrun-lua-check]` table in a TOML file, merged with the options.

Looked up in the current directory when `--config` is not given: `scrun-lua-check.toml`
first, then `pyproject.toml` (used only when it has the table). Keys: `ignore` (list of
codes or code prefixes), `strict` (bool), `lua51` (bool: as --lua51) and `answers` (the dry
run's answers to commands, a list of tables with `command`, a regular expression, and
`status` and `output`). Unknown keys and codes are errors, so a typo in CI configuration
does not silently switch a check off.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass

from scrunlib.errors import UsageError

from scrun_lua_check.answers import Answer
from scrun_lua_check.codes import CODES

TABLE = "scrun-lua-check"
DEFAULT_FILES = ("scrun-lua-check.toml", "pyproject.toml")


@dataclass(frozen=True)
class Settings:
    ignore: frozenset[str] = frozenset()
    strict: bool = False
    lua51: bool = False
    answers: tuple[Answer, ...] = ()


def parse_codes(values: Iterable[str], source: str) -> frozenset[str]:
    """`W803`, `w8`, `W111,W113` → upper-case codes or prefixes; unknown ones are an error."""
    codes: set[str] = set()
    for value in values:
        for item in value.split(","):
            code = item.strip().upper()
            if not code:
                continue
            if not any(known.startswith(code) for known in CODES):
                raise UsageError(f"{source}: unknown code {code!r} (see --list-codes)")
            codes.add(code)
    return frozenset(codes)


def load_settings(path: str | None, directory: str = ".") -> Settings:
    """Settings from `path`, or from the default files in `directory` (none: defaults)."""
    if path is None:
        path, table = _default_table(directory)
    else:
        table = _table(path)
    if table is None:
        return Settings()
    unknown = sorted(set(table) - {"ignore", "strict", "lua51", "answers"})
    if unknown:
        raise UsageError(f"{path}: unknown key {unknown[0]!r} in [tool.{TABLE}]")
    ignore = table.get("ignore", [])
    if not isinstance(ignore, list) or not all(isinstance(code, str) for code in ignore):
        raise UsageError(f"{path}: [tool.{TABLE}] ignore must be a list of codes")
    return Settings(
        parse_codes(ignore, path),
        _flag(table, "strict", path),
        _flag(table, "lua51", path),
        parse_answers(table.get("answers", []), path),
    )


def _flag(table: dict[str, object], key: str, path: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise UsageError(f"{path}: [tool.{TABLE}] {key} must be true or false")
    return value


def parse_answers(entries: object, path: str) -> tuple[Answer, ...]:
    """`[[tool.scrun-lua-check.answers]]` tables: command (regex), status, output."""
    where = f"{path}: [[tool.{TABLE}.answers]]"
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise UsageError(f"{where} must be a list of tables")
    answers: list[Answer] = []
    for entry in entries:
        unknown = sorted(set(entry) - {"command", "status", "output"})
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r}")
        command, status, output = (
            entry.get("command"),
            entry.get("status", 0),
            entry.get("output", ""),
        )
        if not isinstance(command, str):
            raise UsageError(f"{where}: command must be a regular expression (a string)")
        if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 255:
            raise UsageError(f"{where}: status must be an exit status (0 to 255)")
        if not isinstance(output, str):
            raise UsageError(f"{where}: output must be a string")
        try:
            pattern = re.compile(command)
        except re.error as exc:
            raise UsageError(
                f"{where}: command {command!r} is not a regular expression: {exc}"
            ) from None
        answers.append(Answer(pattern, status, output))
    return tuple(answers)


def _default_table(directory: str) -> tuple[str, dict[str, object] | None]:
    """The first default file in `directory` with the table, and the table (each file is
    read once); ("", None) when none has it."""
    for name in DEFAULT_FILES:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            table = _table(candidate)
            if table is not None:
                return candidate, table
    return "", None


def _table(path: str) -> dict[str, object] | None:
    try:
        with open(path, "rb") as stream:
            document = tomllib.load(stream)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    table = document.get("tool", {}).get(TABLE)
    if table is not None and not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.{TABLE}] must be a table")
    return table
