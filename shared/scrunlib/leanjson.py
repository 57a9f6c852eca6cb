"""JSON for `scrun state` without importing the json package.

`import json` imports re (the decoder and encoder both compile patterns), and re imports
enum and functools: ~4 ms, about half of what a bare interpreter start costs, on a command
podman runs for every container. This module reads with the C scanner json itself uses
(CPython's `_json.make_scanner`, so it accepts exactly what json.loads accepts), and writes
the values a state file holds (dict with str keys, list, tuple, str, int, finite float,
bool, None) the way json.dumps writes them with the same `indent` (the unit tests compare
both).
"""

from __future__ import annotations

from _json import encode_basestring_ascii, make_scanner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"


class _Context:
    """What the C scanner reads off a json.JSONDecoder: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity, as json.loads gives them


# typeshed types the argument as a scanner; the C code reads these attributes off it
_scan = make_scanner(_Context())  # type: ignore[arg-type]


def loads(text: str) -> Any:
    """The value of one JSON document; ValueError (json.JSONDecodeError) when it is not."""
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError(f"no JSON value at character {start}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    """`value` as json.dumps(value, indent=indent) writes it (ASCII, keys in their order)."""
    return _encode(value, indent, 0)


def _encode(value: Any, indent: int | None, depth: int) -> str:
    if isinstance(value, str):
        return str(encode_basestring_ascii(value))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value} is not a JSON number")  # as json.dumps(allow_nan=False)
        return float.__repr__(value)
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("JSON object keys must be str here")
        items = [
            f"{_encode(k, None, 0)}: {_encode(v, indent, depth + 1)}" for k, v in value.items()
        ]
        return _container("{", items, "}", indent, depth)
    if isinstance(value, (list, tuple)):
        items = [_encode(item, indent, depth + 1) for item in value]
        return _container("[", items, "]", indent, depth)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _container(opening: str, items: list[str], closing: str, indent: int | None, depth: int) -> str:
    if not items:
        return opening + closing
    if indent is None:
        return opening + ", ".join(items) + closing
    inner = "\n" + " " * (indent * (depth + 1))
    return opening + inner + ("," + inner).join(items) + "\n" + " " * (indent * depth) + closing
