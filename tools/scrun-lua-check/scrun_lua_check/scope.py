"""Scope analysis: which name refers to which local variable, and every read and write.

The walk follows Lua's evaluation and visibility rules (`local x = x` reads the outer `x`;
a `local function` sees itself; `repeat ... until cond` sees the body's locals; parameters and
the function body share one scope). Accesses are numbered in evaluation order and remember the
loops they are in, which is enough to answer "can this written value be read later?" without
a full data-flow analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from scrun_lua_check import nodes as n


class VarKind(Enum):
    LOCAL = "variable"
    FUNCTION = "function"
    ARG = "argument"
    LOOP = "loop variable"
    SELF = "implicit self"


@dataclass(eq=False)
class Access:
    """One read or write of a name, local or global."""

    node: n.Node
    write: bool
    seq: int  # position in evaluation order
    loops: tuple[n.Node, ...]  # enclosing loop statements, outermost first
    function: n.Function | None  # None: the main chunk


@dataclass(eq=False)
class Scope:
    parent: Scope | None
    function: n.Function | None
    variables: dict[str, Variable] = field(default_factory=dict)


@dataclass(eq=False)
class Variable:
    name: str
    kind: VarKind
    decl: n.Node  # LocalName or Param
    scope: Scope
    attrib: str | None = None
    accesses: list[Access] = field(default_factory=list)  # excluding the declaration
    values: list[n.Node] = field(default_factory=list)  # expressions ever assigned to it

    @property
    def reads(self) -> list[Access]:
        return [access for access in self.accesses if not access.write]

    @property
    def writes(self) -> list[Access]:
        return [access for access in self.accesses if access.write]


@dataclass(frozen=True)
class Shadowing:
    """`variable` hides `previous`: in the same scope, an enclosing one, or an outer function."""

    variable: Variable
    previous: Variable

    @property
    def same_scope(self) -> bool:
        return self.variable.scope is self.previous.scope

    @property
    def upvalue(self) -> bool:
        return self.variable.scope.function is not self.previous.scope.function


@dataclass
class ScopeInfo:
    variables: list[Variable] = field(default_factory=list)
    globals: dict[str, list[Access]] = field(default_factory=dict)
    resolved: dict[n.Name, Variable] = field(default_factory=dict)
    declared: dict[n.Node, Variable] = field(default_factory=dict)  # LocalName/Param -> variable
    shadowings: list[Shadowing] = field(default_factory=list)

    def variable(self, node: n.Node) -> Variable | None:
        """The local variable a Name refers to; None for globals and non-names."""
        return self.resolved.get(node) if isinstance(node, n.Name) else None

    def accesses_of(self, node: n.Name) -> list[Access]:
        """All accesses of the variable (local or global) that a Name refers to."""
        variable = self.resolved.get(node)
        return variable.accesses if variable is not None else self.globals.get(node.name, [])

    def is_global(self, node: n.Node, *names: str) -> bool:
        """Whether `node` is a Name referring to the global `names[0]` (or any of `names`)."""
        return isinstance(node, n.Name) and node.name in names and node not in self.resolved

    def global_index(self, node: n.Node, table: str) -> str | None:
        """For `table.key` (or `table["key"]`) with `table` a global: the key, else None."""
        if isinstance(node, n.Index) and self.is_global(node.obj, table):
            return n.static_string(node.key)
        return None


def read_later(write: Access, accesses: list[Access]) -> bool:
    """Whether the value stored by `write` may be read by one of `accesses`.

    A read counts when it comes later in evaluation order, sits in a loop that also contains
    the write (next iteration), or is in another function (which may run at any time).
    """
    for access in accesses:
        if access.write:
            continue
        if access.function is not write.function or access.seq > write.seq:
            return True
        if set(access.loops) & set(write.loops):
            return True
    return False


class Resolver:
    """Walks a chunk once and fills a ScopeInfo."""

    def __init__(self) -> None:
        self.info = ScopeInfo()
        self.scope = Scope(None, None)
        self.loops: tuple[n.Node, ...] = ()
        self.seq = 0

    # ---- bookkeeping ----

    def record(self, node: n.Node, write: bool) -> Access:
        self.seq += 1
        return Access(node, write, self.seq, self.loops, self.scope.function)

    def lookup(self, name: str) -> Variable | None:
        scope: Scope | None = self.scope
        while scope is not None:
            if name in scope.variables:
                return scope.variables[name]
            scope = scope.parent
        return None

    def declare(
        self, decl: n.Node, name: str, kind: VarKind, attrib: str | None = None
    ) -> Variable:
        variable = Variable(name, kind, decl, self.scope, attrib)
        previous = self.lookup(name)
        if previous is not None and kind is not VarKind.SELF:
            self.info.shadowings.append(Shadowing(variable, previous))
        self.scope.variables[name] = variable
        self.info.variables.append(variable)
        self.info.declared[decl] = variable
        return variable

    def push(self, function: n.Function | None = None) -> None:
        """Open a scope; a new function's scope when `function` is given."""
        self.scope = Scope(self.scope, function or self.scope.function)

    def pop(self) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent

    def name(self, node: n.Name, write: bool, value: n.Node | None = None) -> None:
        variable = self.lookup(node.name)
        access = self.record(node, write)
        if variable is None:
            self.info.globals.setdefault(node.name, []).append(access)
            return
        self.info.resolved[node] = variable
        variable.accesses.append(access)
        if value is not None:
            variable.values.append(value)

    # ---- walking ----

    def visit(self, node: n.Node) -> None:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is not None:
            method(node)
        else:
            for child in node.children():
                self.visit(child)

    def visit_Name(self, node: n.Name) -> None:
        self.name(node, write=False)

    def visit_Block(self, node: n.Block, new_scope: bool = True) -> None:
        if new_scope:
            self.push()
        for statement in node.body:
            self.visit(statement)
        if new_scope:
            self.pop()

    def visit_Local(self, node: n.Local) -> None:
        for value in node.values:
            self.visit(value)
        for position, local in enumerate(node.names):
            variable = self.declare(local, local.name, VarKind.LOCAL, local.attrib)
            if position < len(node.values):
                variable.values.append(node.values[position])

    def visit_LocalFunction(self, node: n.LocalFunction) -> None:
        variable = self.declare(node.name, node.name.name, VarKind.FUNCTION)
        variable.values.append(node.func)
        self.visit(node.func)

    def visit_Assign(self, node: n.Assign) -> None:
        for value in node.values:
            self.visit(value)
        for position, target in enumerate(node.targets):
            if isinstance(target, n.Name):
                assigned = node.values[position] if position < len(node.values) else None
                self.name(target, write=True, value=assigned)
            else:
                self.visit(target)

    def visit_FunctionStat(self, node: n.FunctionStat) -> None:
        if isinstance(node.target, n.Name):
            self.name(node.target, write=True, value=node.func)
        else:
            self.visit(node.target)
        self.visit(node.func)

    def visit_Function(self, node: n.Function) -> None:
        outer_loops = self.loops
        self.loops = ()
        self.push(node)
        for param in node.params:
            self.declare(param, param.name, VarKind.SELF if param.implicit else VarKind.ARG)
        self.visit_Block(node.body, new_scope=False)
        self.pop()
        self.loops = outer_loops

    def loop_body(self, loop: n.Node, body: n.Block, names: list[n.LocalName]) -> None:
        outer_loops = self.loops
        self.loops = (*outer_loops, loop)
        self.push()
        for local in names:
            self.declare(local, local.name, VarKind.LOOP)
        self.visit_Block(body, new_scope=False)
        self.pop()
        self.loops = outer_loops

    def visit_NumericFor(self, node: n.NumericFor) -> None:
        for expr in (node.start, node.stop, node.step):
            if expr is not None:
                self.visit(expr)
        self.loop_body(node, node.body, [node.var])

    def visit_GenericFor(self, node: n.GenericFor) -> None:
        for expr in node.exprs:
            self.visit(expr)
        self.loop_body(node, node.body, node.names)

    def visit_While(self, node: n.While) -> None:
        outer_loops = self.loops
        self.loops = (*outer_loops, node)
        self.visit(node.cond)
        self.loops = outer_loops
        self.loop_body(node, node.body, [])

    def visit_Repeat(self, node: n.Repeat) -> None:
        outer_loops = self.loops
        self.loops = (*outer_loops, node)
        self.push()
        self.visit_Block(node.body, new_scope=False)
        self.visit(node.cond)  # `until` sees the body's locals
        self.pop()
        self.loops = outer_loops


def resolve(chunk: n.Chunk) -> ScopeInfo:
    """Scope facts for a parsed chunk (the chunk is a vararg function with no parameters)."""
    resolver = Resolver()
    resolver.visit_Block(chunk.body, new_scope=False)
    return resolver.info
