"""JSON for the hot path (`scrun state`, create, the anchor) without the json package.

`import json` imports re (the decoder and encoder both compile patterns), and re imports
enum and functools: about half of what a bare interpreter start costs
(tools/lint-tree/lint_tree/hotpath.py), on commands podman runs for every container. This
module is plain Python with only
public built-ins: it imports nothing (`-X importtime`: ~0.3 ms), and it reads a 6 KB
config.json of podman's in ~0.4 ms and a state.json in ~0.02 ms. It uses no private
interpreter module (`_json`'s scanner takes a context object whose fields change between
CPython versions).

`loads` accepts exactly what json.loads accepts (RFC 8259 plus NaN, Infinity and -Infinity,
as json.loads does, unless told not to) and returns the same values; anything else is one
ValueError, never another exception, whatever the input (the unit tests compare both on
generated and mutated documents). `dumps` writes the values a state file holds (dict with
str keys, list, tuple, str, int, finite float, bool, None) the way json.dumps writes them
with the same `indent`, `sort_keys` and `ensure_ascii`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"
_DIGITS = "0123456789"
_HEX = frozenset("0123456789abcdefABCDEF")
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_CONSTANTS = {
    "null": None,
    "true": True,
    "false": False,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}
# The words a value may be; without NaN and Infinity when they are refused.
_WORDS = ("null", "true", "false", "NaN", "Infinity")
_PLAIN_WORDS = _WORDS[:3]
# Deeper documents are refused (json.loads fails there with RecursionError instead).
MAX_DEPTH = 200


def loads(text: str, allow_constants: bool = True) -> Any:
    """The value of one JSON document; ValueError when it is not one. `allow_constants`
    False: NaN, Infinity and -Infinity are refused too (what RFC 8259 says)."""
    if not isinstance(text, str):
        raise ValueError(f"JSON text must be str, not {type(text).__name__}")
    parser = _Parser(text, _WORDS if allow_constants else _PLAIN_WORDS)
    value = parser.value(parser.skip(0), 0)
    end = parser.skip(parser.pos)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return value


class _Parser:
    """A recursive descent over `text`; `pos` is where the last value ended."""

    __slots__ = ("pos", "text", "words")

    def __init__(self, text: str, words: tuple[str, ...]) -> None:
        self.text = text
        self.words = words
        self.pos = 0

    def skip(self, pos: int) -> int:
        text = self.text
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        return pos

    def fail(self, what: str, pos: int) -> ValueError:
        return ValueError(f"{what} at character {pos}")

    def value(self, pos: int, depth: int) -> Any:
        text = self.text
        if pos >= len(text):
            raise self.fail("expected a JSON value", pos)
        char = text[pos]
        if char == '"':
            return self.string(pos + 1)
        if char == "{":
            return self.object(pos + 1, depth + 1)
        if char == "[":
            return self.array(pos + 1, depth + 1)
        if char == "-" or char in _DIGITS:
            if text.startswith("-Infinity", pos) and "Infinity" in self.words:
                self.pos = pos + 9
                return _CONSTANTS["-Infinity"]
            return self.number(pos)
        for word in self.words:
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return _CONSTANTS[word]
        raise self.fail("expected a JSON value", pos)

    def object(self, pos: int, depth: int) -> dict[str, Any]:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}", pos)
        text = self.text
        result: dict[str, Any] = {}
        pos = self.skip(pos)
        if text.startswith("}", pos):
            self.pos = pos + 1
            return result
        while True:
            if not text.startswith('"', pos):
                raise self.fail("expected a property name in double quotes", pos)
            key = self.string(pos + 1)
            pos = self.skip(self.pos)
            if not text.startswith(":", pos):
                raise self.fail("expected ':'", pos)
            result[key] = self.value(self.skip(pos + 1), depth)
            pos = self.skip(self.pos)
            if text.startswith("}", pos):
                self.pos = pos + 1
                return result
            if not text.startswith(",", pos):
                raise self.fail("expected ',' or '}'", pos)
            pos = self.skip(pos + 1)

    def array(self, pos: int, depth: int) -> list[Any]:
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}", pos)
        text = self.text
        result: list[Any] = []
        pos = self.skip(pos)
        if text.startswith("]", pos):
            self.pos = pos + 1
            return result
        while True:
            result.append(self.value(pos, depth))
            pos = self.skip(self.pos)
            if text.startswith("]", pos):
                self.pos = pos + 1
                return result
            if not text.startswith(",", pos):
                raise self.fail("expected ',' or ']'", pos)
            pos = self.skip(pos + 1)

    def number(self, start: int) -> int | float:
        """-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, the longest such prefix."""
        text = self.text
        pos = start + 1 if text[start] == "-" else start
        digits = _run(text, pos, _DIGITS)
        if digits == pos:
            raise self.fail("expected a JSON value", start)
        pos = pos + 1 if text[pos] == "0" else digits
        is_float = False
        if text.startswith(".", pos) and _run(text, pos + 1, _DIGITS) > pos + 1:
            pos, is_float = _run(text, pos + 1, _DIGITS), True
        if pos < len(text) and text[pos] in "eE":
            exponent = pos + 2 if text.startswith(("+", "-"), pos + 1) else pos + 1
            if _run(text, exponent, _DIGITS) > exponent:
                pos, is_float = _run(text, exponent, _DIGITS), True
        self.pos = pos
        literal = text[start:pos]
        return float(literal) if is_float else int(literal)  # int(): ValueError past 4300 digits

    def string(self, pos: int) -> str:
        """The string whose opening quote is before `pos`; control characters are refused
        (json.loads' strict mode)."""
        text = self.text
        parts: list[str] = []
        while True:
            end = text.find('"', pos)
            if end < 0:
                raise self.fail("unterminated string", pos - 1)
            escape = text.find("\\", pos, end)
            chunk = text[pos : end if escape < 0 else escape]
            if not chunk.isprintable():
                for offset, char in enumerate(chunk):
                    if char < " ":
                        raise self.fail("invalid control character", pos + offset)
            parts.append(chunk)
            if escape < 0:
                self.pos = end + 1
                return "".join(parts)
            pos = self.escape(escape + 1, parts)

    def escape(self, pos: int, parts: list[str]) -> int:
        """Append the character the escape at `pos` (after its backslash) stands for; return
        where the string goes on."""
        text = self.text
        char = text[pos : pos + 1]
        if char in _ESCAPES and char:
            parts.append(_ESCAPES[char])
            return pos + 1
        if char != "u":
            raise self.fail("invalid \\escape", pos - 1)
        code = self.hex4(pos + 1)
        pos += 5
        if 0xD800 <= code <= 0xDBFF and text.startswith("\\u", pos):
            low = self.hex4(pos + 2)
            if 0xDC00 <= low <= 0xDFFF:
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                pos += 6
        parts.append(chr(code))
        return pos

    def hex4(self, pos: int) -> int:
        digits = self.text[pos : pos + 4]
        if len(digits) != 4 or not _HEX.issuperset(digits):
            raise self.fail("invalid \\uXXXX escape", pos - 2)
        return int(digits, 16)


def _run(text: str, pos: int, chars: str) -> int:
    """Where the run of `chars` starting at `pos` ends."""
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def dumps(
    value: Any, indent: int | None = None, *, sort_keys: bool = False, ensure_ascii: bool = True
) -> str:
    """`value` as json.dumps(value, indent=indent, sort_keys=sort_keys,
    ensure_ascii=ensure_ascii) writes it."""
    return _Encoder(indent, sort_keys, ensure_ascii).encode(value, 0)


# What json.dumps writes for the characters it escapes by name; others below 0x20 and
# above 0x7e become \uXXXX (astral ones as a surrogate pair).
_NAMED_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAMED_ESCAPES.update({"\b": "\\b", "\f": "\\f"})


def encode_string(text: str, ensure_ascii: bool = True) -> str:
    """`text` as a JSON string literal as json.dumps writes it: ASCII only (ensure_ascii),
    or with only `"`, `\\` and the control characters below 0x20 escaped."""
    if (
        (text.isascii() or not ensure_ascii)
        and text.isprintable()
        and '"' not in text
        and "\\" not in text
    ):
        return f'"{text}"'
    out = []
    for char in text:
        named = _NAMED_ESCAPES.get(char)
        if named is not None:
            out.append(named)
        elif " " <= char <= "~" or (char > "~" and not ensure_ascii):
            out.append(char)
        else:
            code = ord(char)
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


class _Encoder:
    """json.dumps' choices for one call, and the values they are applied to."""

    __slots__ = ("ensure_ascii", "indent", "sort_keys")

    def __init__(self, indent: int | None, sort_keys: bool, ensure_ascii: bool) -> None:
        self.indent = indent
        self.sort_keys = sort_keys
        self.ensure_ascii = ensure_ascii

    def encode(self, value: Any, depth: int) -> str:
        if isinstance(value, str):
            return encode_string(value, self.ensure_ascii)
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
                raise ValueError(f"{value} is not a JSON number")  # json.dumps(allow_nan=False)
            return float.__repr__(value)
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise TypeError("JSON object keys must be str here")
            pairs = sorted(value.items()) if self.sort_keys else value.items()
            items = [
                f"{encode_string(k, self.ensure_ascii)}: {self.encode(v, depth + 1)}"
                for k, v in pairs
            ]
            return self.container("{", items, "}", depth)
        if isinstance(value, (list, tuple)):
            items = [self.encode(item, depth + 1) for item in value]
            return self.container("[", items, "]", depth)
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def container(self, opening: str, items: list[str], closing: str, depth: int) -> str:
        indent = self.indent
        if not items:
            return opening + closing
        if indent is None:
            return opening + ", ".join(items) + closing
        inner = "\n" + " " * (indent * (depth + 1))
        return opening + inner + ("," + inner).join(items) + "\n" + " " * (indent * depth) + closing
