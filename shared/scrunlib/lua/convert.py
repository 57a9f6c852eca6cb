"""Values between Python and the embedded Lua (lupa with `encoding=None`): text, numbers, and
the conversion behind `slurm.from_json` / `slurm.to_json` (and their YAML twins, which
convert the same data to and from YAML text).

Lua strings cross as bytes because paths and command output need not be UTF-8; they are
decoded with surrogateescape and re-encoded the same way, so odd bytes survive the round trip.
"""

from __future__ import annotations

import math

# Not `from lupa import lua54`: that goes through lupa's module __getattr__, which imports re.
import lupa.lua54 as lua54

from scrunlib import leanjson
from scrunlib.lua import yamlconv

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

JSON_MAX_DEPTH = 16  # as Slurm's data_t conversion
_INT64 = range(-(2**63), 2**63)
# A uint64 near its maximum (RLIM_INFINITY, 2**64 - 1, in config.json's rlimits, from
# `--ulimit core=-1`) is a float in Lua: 2.0**64, whose integer is no 64-bit value (crun
# read it as 2**63 - 1). It is written back as the largest uint64.
_UINT64_MAX = 2**64 - 1


class Refused(Exception):
    """A slurm.* call the script got wrong: becomes a Lua error at the script's line."""


class JsonCodec:
    """JSON (and YAML) text ↔ Lua tables of one Lua state. `marks` is the state's weak table that
    remembers whether a table came from a JSON object or array (and which table is
    json.null), so that an emptied object is written back as `{}`, not `[]`."""

    def __init__(self, lua: Any, marks: Any) -> None:
        self._lua = lua
        self._marks = marks

    def from_json(self, text: Any) -> Any:
        return self._from_text(text, "json", _parse_json)

    def to_json(self, value: Any) -> bytes:
        return self._to_text(value, "json", _dump_json)

    def from_yaml(self, text: Any) -> Any:
        """As from_json, for YAML text (slurm.from_yaml): the same tables come out."""
        return self._from_text(text, "yaml", yamlconv.loads)

    def to_yaml(self, value: Any) -> bytes:
        return self._to_text(value, "yaml", yamlconv.dumps)

    def _from_text(self, text: Any, kind: str, parse: Callable[[str], Any]) -> Any:
        failed = f"Conversion from application/{kind} failed"
        if not isinstance(text, bytes):
            raise Refused(f"{failed}: expected a string, got {lua_type(text)}")
        try:
            return self._json_to_lua(parse(decode(text)))
        except (ValueError, RecursionError) as exc:
            raise Refused(f"{failed}: {exc}") from None

    def _to_text(self, value: Any, kind: str, dump: Callable[[Any], str]) -> bytes:
        try:
            data = self._lua_to_json(value, 0)
        except Refused as exc:
            raise Refused(f"Conversion to application/{kind} failed: {exc}") from None
        return encode(dump(data))

    def _json_to_lua(self, data: Any) -> Any:
        """Python JSON data → Lua values; null vanishes (nil), containers remember their kind
        so that an empty object is written back as `{}`, not `[]`."""
        if isinstance(data, dict):
            table = self._lua.table()
            for key, item in data.items():
                if item is not None:
                    table[encode(key)] = self._json_to_lua(item)
            self._marks[table] = b"object"
            return table
        if isinstance(data, list):
            table = self._lua.table()
            for index, item in enumerate(data, 1):
                if item is not None:
                    table[index] = self._json_to_lua(item)
            self._marks[table] = b"array"
            return table
        if isinstance(data, str):
            return encode(data)
        if isinstance(data, int) and not isinstance(data, bool):
            return lua_integer(data)
        return data

    def _lua_to_json(self, value: Any, depth: int) -> Any:
        """Lua value → JSON data, as Slurm converts: sequences 1..n become arrays, empty
        tables `[]` unless they came from a JSON object. Integral floats are written as
        integers because runc and crun reject `1000.0` where an integer id is expected."""
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise Refused(f"{value} has no JSON form")
            return min(int(value), _UINT64_MAX) if value.is_integer() else value
        if isinstance(value, bytes):
            return decode(value)
        if lua54.lua_type(value) != "table":
            raise Refused(f"a {lua_type(value)} has no JSON form")
        if depth >= JSON_MAX_DEPTH:
            raise Refused(f"tables nested deeper than {JSON_MAX_DEPTH}")
        mark = self._marks[value]
        if mark == b"null":
            return None
        items = dict(value.items())
        if not items:
            return {} if mark == b"object" else []
        if all(isinstance(key, int) and not isinstance(key, bool) for key in items) and sorted(
            items
        ) == list(range(1, len(items) + 1)):
            return [self._lua_to_json(items[index], depth + 1) for index in sorted(items)]
        return {_json_key(key): self._lua_to_json(item, depth + 1) for key, item in items.items()}


def _parse_json(text: str) -> Any:
    """json.loads' value, without json's import for a good document (leanjson reads those
    as json.loads does). NaN and Infinity are refused, as Slurm's parser refuses them. What
    leanjson refuses goes to json.loads: its own message, or the value of a document nested
    deeper than leanjson reads."""
    try:
        return leanjson.loads(text, allow_constants=False)
    except (ValueError, RecursionError):
        pass
    import json

    return json.loads(text, parse_constant=_reject_constant)


def _dump_json(data: Any) -> str:
    return leanjson.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _json_key(key: Any) -> str:
    text = as_lua_string(key)
    if text is None:
        raise Refused(f"a table key of type {lua_type(key)} has no JSON form")
    return text


def to_number(text: bytes) -> float | None:
    """A Lua string's numeric value (as lua_tonumber), None when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def lua_number_text(value: int | float) -> str:
    """tostring() of a Lua number: `%.14g`, and floats keep a `.0`."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.14g}"
    return text + ".0" if text.lstrip("-").isdigit() else text


def as_lua_string(value: Any) -> str | None:
    """A Lua string, or a number converted as Lua converts it where a string is expected
    (`1` → "1", `1.5` → "1.5"); None for any other value."""
    if isinstance(value, bytes):
        return decode(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return lua_number_text(value)
    return None


def lua_integer(value: int) -> int | float:
    """Lua integers are 64-bit; larger constants (INFINITE64) become floats, as upstream."""
    return value if value in _INT64 else float(value)


def lua_type(value: Any) -> str:
    """Lua's type() name of a value that came from Lua."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, bytes):
        return "string"
    return str(lua54.lua_type(value) or "userdata")


def describe(value: Any) -> str:
    """A returned value for a message: strings quoted, numbers as Lua prints them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return leanjson.encode_string(decode(value))
    if isinstance(value, int | float):
        return lua_number_text(value)
    return lua_type(value)


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")
