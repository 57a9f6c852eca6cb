"""Static analysis of one script: syntax (real Lua compiler + own parser), then every check.

The real Lua 5.4 compiler (lupa) has the last word on syntax; the checker's own parser adds
the column and the tree the other checks need. Should the two ever disagree the other way
(Lua accepts what the parser rejects) that is the checker's fault, reported as E002 rather
than blamed on the script.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from scrun_lua_check.checks import run_checks
from scrun_lua_check.codes import matches
from scrun_lua_check.context import LintContext
from scrun_lua_check.lexer import Comment, LuaSyntaxError
from scrun_lua_check.luaenv import CompileError, lua_env
from scrun_lua_check.parser import parse
from scrun_lua_check.report import Diagnostic
from scrun_lua_check.scope import resolve

# `-- scrun-lua-check: ignore W803, W111` (no codes: everything) silences its own line.
SUPPRESSION = re.compile(r"scrun-lua-check:\s*ignore\b([\sA-Za-z0-9,]*)")
_NEAR = re.compile(r"near '(.*)'$")


def lint(path: str, source: bytes, *, lua51: bool = False) -> list[Diagnostic]:
    """All diagnostics for `source` (the content of `path`), sorted by position; with
    `lua51`, Lua 5.4's standard names that Lua 5.1 lacks count as undefined."""
    text = source.decode("utf-8", errors="replace")
    lua = lua_env(lua51)
    compile_error = lua.compile_error(source)
    try:
        chunk, comments = parse(text)
    except LuaSyntaxError as error:
        if compile_error is None:
            return [
                Diagnostic(
                    path,
                    error.line,
                    error.col,
                    "E002",
                    "Lua compiles this script but"
                    f" scrun-lua-check cannot parse it ({error.message}); no other"
                    " checks were run",
                )
            ]
        return [syntax_error(path, text, compile_error, error)]
    if compile_error is not None:
        return [syntax_error(path, text, compile_error, None)]
    ctx = LintContext(path, chunk, resolve(chunk), lua)
    run_checks(ctx)
    return sorted(set(suppress(ctx.diagnostics, comments)))


def syntax_error(
    path: str, text: str, error: CompileError, parsed: LuaSyntaxError | None
) -> Diagnostic:
    """E001 with Lua's message and line, and the best column available."""
    if parsed is not None and parsed.line == error.line:
        col = parsed.col
    else:
        lines = text.splitlines()
        line_text = lines[error.line - 1] if 0 < error.line <= len(lines) else ""
        near = _NEAR.search(error.message)
        if near is not None and near.group(1) in line_text:
            col = line_text.index(near.group(1)) + 1
        else:
            col = len(line_text) + 1 if error.message.endswith("<eof>") else 1
    return Diagnostic(path, error.line, col, "E001", error.message)


def suppress(diagnostics: Iterable[Diagnostic], comments: list[Comment]) -> list[Diagnostic]:
    silenced: dict[int, frozenset[str]] = {}
    for comment in comments:
        match = SUPPRESSION.search(comment.text)
        if match is not None:
            codes = frozenset(code.upper() for code in re.findall(r"[A-Za-z0-9]+", match.group(1)))
            silenced[comment.line] = codes or frozenset({""})  # "" is a prefix of every code
    return [d for d in diagnostics if not matches(d.code, silenced.get(d.line, frozenset()))]
