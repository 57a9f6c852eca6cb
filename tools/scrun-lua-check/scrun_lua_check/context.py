"""What every check needs: the tree, the scope facts, the Lua facts, and common questions.

The questions several checks ask ("is this a call of slurm.X?", "which functions are the
hooks?") are answered once here, so each check module holds only its own rule. Facts only:
the analyses over them (value flow, command uses) are scrun_lua_check.analyses.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.luaenv import LuaEnv
from scrun_lua_check.report import Diagnostic
from scrun_lua_check.scope import ScopeInfo, Variable

HOOK_NAMES = frozenset(hook.name for hook in api.ALL_HOOKS)
# Calls that run a shell command: the slurm ones wait for the command; all of them block.
SLURM_COMMANDS = ("remote_command", "allocator_command")
SHELL_CALLS = {("os", "execute"), ("io", "popen")}

LITERAL_KINDS: dict[type[n.Node], str] = {
    n.Number: "number", n.String: "string", n.Boolean: "boolean", n.Nil: "nil",
    n.Table: "table", n.Function: "function",
}  # fmt: skip
BINARY_KINDS = {
    **dict.fromkeys(("+", "-", "*", "/", "//", "%", "^", "&", "|", "~", "<<", ">>"), "number"),
    **dict.fromkeys(("==", "~=", "<", ">", "<=", ">="), "boolean"),
    "..": "string",
}
SLURM_CONSTANTS = api.all_constants()
SLURM_FIELD_KINDS = {
    **dict.fromkeys(SLURM_CONSTANTS, "number"),
    **dict.fromkeys(api.STRING_CONSTANTS, "string"),
    **dict.fromkeys(api.FUNCTIONS, "function"),
}
STRING_RESULTS = {
    ("string", name) for name in ("format", "rep", "sub", "upper", "lower", "reverse")
}


@dataclass(frozen=True)
class Definition:
    """A binding of a name: `function NAME(...)`, `NAME = value`, `local NAME = value`."""

    name: str
    node: n.Node  # the defining statement
    value: n.Node  # the function literal, or whatever else was assigned
    is_global: bool

    @property
    def func(self) -> n.Function | None:
        return self.value if isinstance(self.value, n.Function) else None


@dataclass
class LintContext:
    """One script under check: its tree and facts, and the diagnostics the checks report."""

    path: str
    chunk: n.Chunk
    scopes: ScopeInfo
    lua: LuaEnv
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def report(self, node: n.Node, code: str, message: str) -> None:
        self.report_at(node.line, node.col, code, message)

    def report_at(self, line: int, col: int, code: str, message: str) -> None:
        self.diagnostics.append(Diagnostic(self.path, line, col, code, message))

    @cached_property
    def all_nodes(self) -> list[n.Node]:
        return list(n.walk(self.chunk))

    def calls(self) -> Iterator[n.Call | n.MethodCall]:
        for node in self.all_nodes:
            if isinstance(node, (n.Call, n.MethodCall)):
                yield node

    def called_function(self, call: n.Call) -> n.Function | None:
        """The function literal a call of a plain name surely calls: a local bound once to a
        function, or a global the script defines exactly once."""
        if not isinstance(call.func, n.Name):
            return None
        variable = self.scopes.variable(call.func)
        if variable is not None:
            values = variable.values
            return values[0] if len(values) == 1 and isinstance(values[0], n.Function) else None
        found = [d.func for d in self.definitions if d.is_global and d.name == call.func.name]
        return found[0] if len(found) == 1 else None

    def slurm_function(self, node: n.Node) -> str | None:
        """For a call `slurm.NAME(...)` (global slurm): NAME; else None."""
        if isinstance(node, n.Call):
            return self.scopes.global_index(node.func, "slurm")
        return None

    def library_call(self, node: n.Node) -> tuple[str, str] | None:
        """For a call `lib.NAME(...)` of a global standard library table: (lib, NAME)."""
        if not isinstance(node, n.Call) or not isinstance(node.func, n.Index):
            return None
        obj = node.func.obj
        if isinstance(obj, n.Name) and obj.name in self.lua.library_fields:
            key = self.scopes.global_index(node.func, obj.name)
            return (obj.name, key) if key is not None else None
        return None

    def global_call(self, node: n.Node) -> str | None:
        """For a call `NAME(...)` of a global function: NAME."""
        if isinstance(node, n.Call) and isinstance(node.func, n.Name):
            return node.func.name if self.scopes.is_global(node.func, node.func.name) else None
        return None

    def command_call(self, node: n.Node) -> str | None:
        """For a call that runs a shell command: its name as written (`slurm.remote_command`)."""
        slurm_name = self.slurm_function(node)
        if slurm_name in SLURM_COMMANDS:
            return f"slurm.{slurm_name}"
        library = self.library_call(node)
        return f"{library[0]}.{library[1]}" if library in SHELL_CALLS else None

    def assigned_variable(self, target: n.Node) -> Variable | None:
        """The local variable an assignment target (LocalName or Name) stores into."""
        if isinstance(target, n.LocalName):
            return self.scopes.declared.get(target)
        return self.scopes.variable(target)

    @cached_property
    def definitions(self) -> list[Definition]:
        """Every `name = value` binding: function statements, locals, assignments."""
        found: list[Definition] = []
        for node in self.all_nodes:
            if isinstance(node, n.FunctionStat):
                pairs: list[tuple[n.Node, n.Node]] = [(node.target, node.func)]
            elif isinstance(node, n.LocalFunction):
                pairs = [(node.name, node.func)]
            elif isinstance(node, n.Local):
                pairs = list(zip(node.names, node.values, strict=False))
            elif isinstance(node, n.Assign):
                pairs = list(zip(node.targets, node.values, strict=False))
            else:
                continue
            for target, value in pairs:
                name, is_global = self._binding_name(target)
                found.append(Definition(name, node, value, is_global))
        return found

    def _binding_name(self, target: n.Node) -> tuple[str, bool]:
        """The name a target binds (`_G.x` is the global `x`) and whether it is a global."""
        if isinstance(target, n.LocalName):
            return target.name, False
        if isinstance(target, n.Name):
            return target.name, self.scopes.is_global(target, target.name)
        key = self.scopes.global_index(target, "_G")
        return (key, True) if key is not None else (n.describe(target), False)

    @cached_property
    def hook_definitions(self) -> list[Definition]:
        return [d for d in self.definitions if d.name in HOOK_NAMES]

    @cached_property
    def hook_functions(self) -> dict[n.Function, str]:
        """Function literals defined as a global hook, with the hook name."""
        return {d.func: d.name for d in self.hook_definitions if d.is_global and d.func is not None}

    def value_kind(self, node: n.Node) -> str | None:
        """The Lua type an expression surely has ('number', 'string', ...), None if unknown."""
        node = n.unparen(node)
        literal = LITERAL_KINDS.get(type(node))
        if literal is not None:
            return literal
        if isinstance(node, n.UnOp):
            return "boolean" if node.op == "not" else "number"
        if isinstance(node, n.BinOp):
            return BINARY_KINDS.get(node.op)
        slurm_field = self.scopes.global_index(node, "slurm")
        if slurm_field is not None:
            return SLURM_FIELD_KINDS.get(slurm_field)
        library = self.library_call(node)
        if library is not None and library[0] == "math":
            return "number"
        if library in STRING_RESULTS or self.global_call(node) == "tostring":
            return "string"
        return None

    @cached_property
    def hook_like_functions(self) -> set[n.Function]:
        """Functions defined under a hook's name or a near miss (global or not): their
        parameters are scrun's to choose, so unused ones are not reported."""
        return {
            d.func
            for d in self.definitions
            if d.func is not None and (d.name in HOOK_NAMES or closest(d.name, HOOK_NAMES))
        }

    def hook_of(self, node: n.Node) -> str | None:
        """The hook whose own body (not a nested function) contains `node`."""
        return self.hook_functions.get(node.function) if node.function is not None else None


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate `name` is most likely a misspelling of, if any is close enough."""
    close = difflib.get_close_matches(name, sorted(set(candidates) - {name}), n=1, cutoff=0.75)
    return close[0] if close else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest candidate, or an empty string."""
    match = closest(name, candidates)
    return f"; did you mean '{match}'?" if match else ""
