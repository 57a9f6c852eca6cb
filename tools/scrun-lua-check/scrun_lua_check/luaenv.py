"""What a real, fresh Lua 5.4 (through lupa) says: compile errors, standard names, modules.

Asking the real interpreter keeps the checker honest: the syntax verdict is the compiler's
own, the standard library names are exactly those of the Lua in use, and `require` targets
are looked up on that Lua's `package.path`/`package.cpath`. No `lua` binary is needed.

`lua_env(lua51=True)` keeps only the standard names Lua 5.1 has too (asked of lupa's own
Lua 5.1): Slurm's own scrun embeds the Lua it was built against, 5.1 on Debian, and a
script meant for either scrun must do without `table.unpack`, `utf8` and the like.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from scrunlib.lua import api

try:
    import lupa.lua54 as lupa_module  # scrun targets Lua 5.4; lupa 2 bundles several versions
except ImportError:  # a lupa built with a single Lua
    import lupa as lupa_module

STANDARD_LIBRARIES = (
    "coroutine",
    "debug",
    "io",
    "math",
    "os",
    "package",
    "string",
    "table",
    "utf8",
)
CHUNK_NAME = "scrun.lua"
_COMPILE_ERROR = re.compile(rf"^{re.escape(CHUNK_NAME)}:(\d+): (.*)$", re.DOTALL)


def new_runtime(module: Any = lupa_module) -> Any:
    """A Lua state of lupa's `module` (a Lua version) with only Lua's standard library (no
    `python` bridge functions)."""
    return module.LuaRuntime(register_eval=False, register_builtins=False)


@dataclass(frozen=True)
class CompileError:
    line: int
    message: str


@dataclass(frozen=True)
class LuaEnv:
    version: str
    globals: frozenset[str]
    library_fields: dict[str, frozenset[str]]
    path: str
    cpath: str
    loaded: frozenset[str]
    # standard names of Lua 5.4 left out because Lua 5.1 lacks them ("table.unpack", "utf8")
    newer_only: frozenset[str] = frozenset()

    def compile_error(self, source: bytes) -> CompileError | None:
        """Compile `source` as Lua would load scrun.lua; None when it compiles."""
        source = source[api.shebang_length(source) :]
        result = new_runtime().globals().load(source, "=" + CHUNK_NAME)
        if not isinstance(result, tuple):  # lupa: one value (the function) on success
            return None
        error = result[1]
        text = error.decode() if isinstance(error, bytes) else str(error)
        match = _COMPILE_ERROR.match(text)
        return CompileError(int(match.group(1)), match.group(2)) if match else CompileError(1, text)

    def find_module(self, name: str) -> str | None:
        """Where `require(name)` would load from: 'scrun', 'builtin', a file path, or None."""
        if name in api.JSON_MODULES:
            return "scrun"
        if name in self.loaded:
            return "builtin"
        # package.searchpath's rule: each ';'-separated template with '?' -> name, '.' -> '/'.
        relative = name.replace(".", "/")
        for search_path in (self.path, self.cpath):
            for template in search_path.split(";"):
                candidate = template.replace("?", relative)
                if template and os.path.isfile(candidate):
                    return candidate
        return None


@cache
def lua_env(lua51: bool = False) -> LuaEnv:
    """Facts about the Lua in use, read once from a fresh runtime; with `lua51`, its standard
    names limited to those Lua 5.1 has as well."""
    lua = new_runtime()
    g = lua.globals()
    names, fields = _standard_names(g)
    loaded = frozenset(str(key) for key in g.package.loaded) - {"python"}
    version = str(g._VERSION)
    newer_only: frozenset[str] = frozenset()
    if lua51:
        from lupa import lua51 as lupa51

        old_names, old_fields = _standard_names(new_runtime(lupa51).globals())
        newer_only = frozenset(names - old_names) | frozenset(
            f"{library}.{name}"
            for library in fields.keys() & old_fields.keys()
            for name in fields[library] - old_fields[library]
        )
        names &= old_names
        fields = {lib: fields[lib] & old_fields[lib] for lib in fields.keys() & old_fields.keys()}
        version += ", limited to what Lua 5.1 has too"
    return LuaEnv(
        version, names, fields, str(g.package.path), str(g.package.cpath), loaded, newer_only
    )


def _standard_names(g: Any) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """A runtime's global names and the fields of its standard libraries."""
    names = frozenset(str(key) for key in g) - {"python"}
    fields = {
        library: frozenset(str(key) for key in g[library])
        for library in STANDARD_LIBRARIES
        if g[library] is not None
    }
    return names, fields
