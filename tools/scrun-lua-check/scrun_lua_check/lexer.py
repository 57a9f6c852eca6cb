"""Tokenizer for Lua 5.4 source, keeping line and column of every token.

The checker needs positions for every diagnostic and the decoded value of string literals
(format strings, `require` names, command text), which Lua's own `load` cannot give. Comments
are kept apart so inline suppressions (`-- scrun-lua-check: ignore W803`) can be found.
Error messages follow Lua's wording (`unfinished string near '"abc'`) so they read the same
whether they come from this lexer or from the real Lua compiler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from scrunlib.lua import api

KEYWORDS = frozenset((
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
))  # fmt: skip
# Longest first, so `...` wins over `..` and `..` over `.`.
SYMBOLS = (
    "...", "..", "==", "~=", "<=", ">=", "<<", ">>", "//", "::",
    "+", "-", "*", "/", "%", "^", "#", "&", "~", "|", "<", ">", "=",
    "(", ")", "{", "}", "[", "]", ";", ":", ",", ".",
)  # fmt: skip
SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", '"': '"', "'": "'", "\n": "\n", "\r": "\n",
}  # fmt: skip

_HEX_NUMBER = re.compile(r"0[xX]([0-9a-fA-F]*)(\.[0-9a-fA-F]*)?([pP][+-]?[0-9]+)?")
_DEC_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LONG_BRACKET = re.compile(r"\[(=*)\[")
_SPACE = re.compile(r"[ \t\f\v]+")
_UTF8_ESCAPE = re.compile(r"u\{([0-9a-fA-F]+)\}")
_DECIMAL_ESCAPE = re.compile(r"[0-9]{1,3}")


class Kind(Enum):
    NAME = "name"
    KEYWORD = "keyword"
    NUMBER = "number"
    STRING = "string"
    SYMBOL = "symbol"
    EOF = "eof"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str  # source text (keyword, symbol, name) or raw literal text for numbers/strings
    line: int
    col: int
    value: str | int | float | None = None  # decoded string or number

    def near(self) -> str:
        """How Lua names this token in an error message (`near 'x'`, `near <eof>`)."""
        return "<eof>" if self.kind is Kind.EOF else f"'{self.text}'"


@dataclass(frozen=True)
class Comment:
    text: str  # without the leading `--` and without long-bracket delimiters
    line: int
    col: int


class LuaSyntaxError(Exception):
    """A syntax error at a position; `message` uses the Lua compiler's wording."""

    def __init__(self, message: str, line: int, col: int) -> None:
        super().__init__(f"{line}:{col}: {message}")
        self.message = message
        self.line = line
        self.col = col


class Lexer:
    """Turns source text into tokens; one instance per source."""

    def __init__(self, source: str) -> None:
        self.src = source
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.tokens: list[Token] = []
        self.comments: list[Comment] = []
        self.pos = api.shebang_length(source)

    @property
    def col(self) -> int:
        return self.pos - self.line_start + 1

    def error(
        self, message: str, near: str | None = None, col: int | None = None
    ) -> LuaSyntaxError:
        text = f"{message} near {near}" if near is not None else message
        return LuaSyntaxError(text, self.line, col or self.col)

    def newline(self) -> None:
        """Consume one line break (\\n, \\r, \\r\\n or \\n\\r count once, as in Lua)."""
        first = self.src[self.pos]
        self.pos += 1
        if (
            self.pos < len(self.src)
            and self.src[self.pos] in "\r\n"
            and self.src[self.pos] != first
        ):
            self.pos += 1
        self.line += 1
        self.line_start = self.pos

    def run(self) -> list[Token]:
        src = self.src
        while True:
            if self.pos >= len(src):
                self.tokens.append(Token(Kind.EOF, "<eof>", self.line, self.col))
                return self.tokens
            char = src[self.pos]
            if char in "\r\n":
                self.newline()
            elif match := _SPACE.match(src, self.pos):
                self.pos = match.end()
            elif src.startswith("--", self.pos):
                self.comment()
            elif match := _NAME.match(src, self.pos):
                word = match.group()
                kind = Kind.KEYWORD if word in KEYWORDS else Kind.NAME
                self.tokens.append(Token(kind, word, self.line, self.col))
                self.pos = match.end()
            elif char.isdigit() or (char == "." and src[self.pos + 1 : self.pos + 2].isdigit()):
                self.number()
            elif char in "\"'":
                self.short_string(char)
            elif char == "[" and _LONG_BRACKET.match(src, self.pos):
                line, col = self.line, self.col
                start = self.pos
                value = self.long_bracket("string")
                raw = src[start : self.pos]
                self.tokens.append(Token(Kind.STRING, raw, line, col, value))
            else:
                self.symbol()

    def symbol(self) -> None:
        for symbol in SYMBOLS:
            if self.src.startswith(symbol, self.pos):
                self.tokens.append(Token(Kind.SYMBOL, symbol, self.line, self.col))
                self.pos += len(symbol)
                return
        raise self.error("unexpected symbol", f"'{self.src[self.pos]}'")

    def comment(self) -> None:
        line, col = self.line, self.col
        self.pos += 2
        if _LONG_BRACKET.match(self.src, self.pos):
            text = self.long_bracket("comment")
        else:
            end = self.pos
            while end < len(self.src) and self.src[end] not in "\r\n":
                end += 1
            text = self.src[self.pos : end]
            self.pos = end
        self.comments.append(Comment(text, line, col))

    def long_bracket(self, what: str) -> str:
        """Read `[==[ ... ]==]` starting at pos; returns the content (first newline dropped)."""
        match = _LONG_BRACKET.match(self.src, self.pos)
        assert match is not None
        start_line = self.line
        close = "]" + match.group(1) + "]"
        self.pos = match.end()
        if self.pos < len(self.src) and self.src[self.pos] in "\r\n":
            self.newline()
        parts: list[str] = []
        while True:
            if self.pos >= len(self.src):
                raise self.error(f"unfinished long {what} (starting at line {start_line})", "<eof>")
            char = self.src[self.pos]
            if self.src.startswith(close, self.pos):
                self.pos += len(close)
                return "".join(parts)
            if char in "\r\n":
                self.newline()
                parts.append("\n")
            else:
                parts.append(char)
                self.pos += 1

    def number(self) -> None:
        src = self.src
        match = _HEX_NUMBER.match(src, self.pos) or _DEC_NUMBER.match(src, self.pos)
        assert match is not None
        end = match.end()
        while end < len(src) and (src[end].isalnum() or src[end] in "._"):
            end += 1  # Lua reads the whole run and then rejects it
        text = src[self.pos : end]
        if end != match.end() or text.lower() in ("0x", "0x."):
            raise self.error("malformed number", f"'{text}'")
        self.tokens.append(Token(Kind.NUMBER, text, self.line, self.col, number_value(text)))
        self.pos = end

    def short_string(self, quote: str) -> None:
        line, col = self.line, self.col
        start = self.pos
        self.pos += 1
        parts: list[str] = []
        src = self.src
        while True:
            if self.pos >= len(src):
                raise self.error("unfinished string", "<eof>")
            char = src[self.pos]
            if char == quote:
                self.pos += 1
                break
            if char in "\r\n":
                raise self.error("unfinished string", f"'{src[start : self.pos]}'")
            if char == "\\":
                parts.append(self.escape(start))
            else:
                parts.append(char)
                self.pos += 1
        raw = src[start : self.pos]
        self.tokens.append(Token(Kind.STRING, raw, line, col, "".join(parts)))

    def escape(self, start: int) -> str:
        """Decode the escape sequence at pos (which is on the backslash)."""
        src = self.src
        col = self.col  # errors point at the backslash
        self.pos += 1
        char = src[self.pos : self.pos + 1]
        if char in ("\r", "\n"):
            self.newline()
            return "\n"
        if char in SIMPLE_ESCAPES:
            self.pos += 1
            return SIMPLE_ESCAPES[char]
        if char == "z":
            self.pos += 1
            while self.pos < len(src) and src[self.pos].isspace():
                if src[self.pos] in "\r\n":
                    self.newline()
                else:
                    self.pos += 1
            return ""
        if char == "x":
            digits = src[self.pos + 1 : self.pos + 3]
            if len(digits) == 2 and all(c in "0123456789abcdefABCDEF" for c in digits):
                self.pos += 3
                return chr(int(digits, 16))
            raise self.error("hexadecimal digit expected", f"'{src[start : self.pos + 3]}'", col)
        if char == "u":
            match = _UTF8_ESCAPE.match(src, self.pos)
            if match is None or int(match.group(1), 16) >= 2**31:
                raise self.error("invalid escape sequence", f"'{src[start : self.pos + 1]}'", col)
            self.pos = match.end()
            return chr(min(int(match.group(1), 16), 0x10FFFF))
        if char.isdigit():
            match = _DECIMAL_ESCAPE.match(src, self.pos)
            assert match is not None
            if int(match.group()) > 255:
                raise self.error("decimal escape too large", f"'{src[start : match.end()]}'", col)
            self.pos = match.end()
            return chr(int(match.group()))
        raise self.error("invalid escape sequence", f"'{src[start : self.pos + 1]}'", col)


def number_value(text: str) -> int | float:
    """The numeric value of a Lua numeral (hex integers wrap around as in Lua)."""
    lowered = text.lower()
    if lowered.startswith("0x"):
        if "." in lowered or "p" in lowered:
            mantissa = lowered if "p" in lowered else lowered + "p0"
            return float.fromhex(mantissa)
        value = int(lowered, 16) % 2**64
        return value - 2**64 if value >= 2**63 else value
    if "." in lowered or "e" in lowered:
        return float(lowered)
    value = int(lowered)
    return value if value < 2**63 else float(value)


def tokenize(source: str) -> tuple[list[Token], list[Comment]]:
    """Tokens (ending with an EOF token) and comments of a Lua source text."""
    lexer = Lexer(source)
    return lexer.run(), lexer.comments
