"""Which values assigned to local variables can ever be read: backward liveness over the tree.

A value stored by `x = v` (or `local x = v`) is *used* when some path from the assignment
reaches a read of `x` before another assignment to `x`. The walk goes backwards through each
function's statements with the set of variables whose current value may still be read
("live"): an assignment kills its variable, a read makes it live; `if` joins its branches,
loops repeat until nothing changes, `break` continues with what is live after the loop.

Deliberately conservative, so that a value reported unused really is: variables a nested
function reads or writes (upvalues, which may run at any time) are left out, a `goto`
makes every variable live, and `local x = nil` is a declaration, not a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scrun_lua_check import nodes as n
from scrun_lua_check.scope import ScopeInfo, Variable

Live = frozenset[Variable]


@dataclass
class ValueFlow:
    """The targets (LocalName or Name nodes) of tracked assignments, and those whose value
    may be read."""

    assigned: set[n.Node] = field(default_factory=set)
    used: set[n.Node] = field(default_factory=set)

    def tracks(self, target: n.Node) -> bool:
        return target in self.assigned

    def is_used(self, target: n.Node) -> bool:
        """Whether the value stored at `target` may be read (untracked targets: assumed so)."""
        return target not in self.assigned or target in self.used


def value_flow(chunk: n.Chunk, scopes: ScopeInfo, functions: Iterable[n.Function]) -> ValueFlow:
    flow = ValueFlow()
    bodies: list[tuple[n.Function | None, n.Block]] = [(None, chunk.body)]
    bodies += [(function, function.body) for function in functions]
    for function, body in bodies:
        tracked = frozenset(
            variable
            for variable in scopes.variables
            if variable.scope.function is function
            and all(access.function is function for access in variable.accesses)
        )
        _Walk(scopes, tracked, flow).block(body.body, frozenset(), frozenset())
    return flow


class _Walk:
    """One function body, walked backwards."""

    def __init__(self, scopes: ScopeInfo, tracked: Live, flow: ValueFlow) -> None:
        self.scopes = scopes
        self.tracked = tracked
        self.flow = flow

    def block(self, statements: Sequence[n.Node], live: Live, after_loop: Live) -> Live:
        for statement in reversed(statements):
            live = self.statement(statement, live, after_loop)
        return live

    def statement(self, node: n.Node, live: Live, after_loop: Live) -> Live:
        if isinstance(node, n.Local):
            return self.assign(node.names, node.values, live)
        if isinstance(node, n.Assign):
            return self.assign(node.targets, node.values, live)
        if isinstance(node, n.Return):
            return self.reads(node.values)
        if isinstance(node, n.Break):
            return after_loop
        if isinstance(node, n.Goto):
            return self.tracked
        if isinstance(node, n.Do):
            return self.block(node.body.body, live, after_loop)
        if isinstance(node, n.If):
            result = live if node.orelse is None else self.block(node.orelse.body, live, after_loop)
            for cond, body in reversed(node.clauses):
                result = self.reads([cond]) | self.block(body.body, live, after_loop) | result
            return result
        if isinstance(node, (n.While, n.NumericFor, n.GenericFor)):
            return self.loop(node, live)
        if isinstance(node, n.Repeat):
            start = live
            while True:  # the body runs first; after `until` either the loop ends or repeats
                end = self.reads([node.cond]) | live | start
                new_start = self.block(node.body.body, end, live)
                if new_start == start:
                    return start
                start = new_start
        if isinstance(node, n.LocalFunction):
            return live - self.variables([node.name])
        if isinstance(node, n.FunctionStat):
            target = node.target
            if isinstance(target, n.Name):
                return live - self.variables([target])
            return live | self.reads([target])
        return live | self.reads([node])  # a call statement; labels read nothing

    def loop(self, node: n.While | n.NumericFor | n.GenericFor, live: Live) -> Live:
        """Live before a loop that may run its body any number of times (also zero)."""
        if isinstance(node, n.While):
            check, before = self.reads([node.cond]), frozenset[Variable]()
        elif isinstance(node, n.NumericFor):
            check = frozenset()
            before = self.reads([x for x in (node.start, node.stop, node.step) if x is not None])
        else:
            check, before = frozenset(), self.reads(node.exprs)
        head = check | live  # at the top of each round: before `while`'s test, or the next item
        while True:
            new_head = check | live | self.block(node.body.body, head, live)
            if new_head == head:
                return head | before
            head = new_head

    def assign(self, targets: Sequence[n.Node], values: Sequence[n.Node], live: Live) -> Live:
        """`targets = values`: record which stored values may be read, then kill and read."""
        spread = bool(values) and isinstance(values[-1], n.MULTI_VALUE)
        written: set[Variable] = set()
        indexed: list[n.Node] = []
        for position, target in enumerate(targets):
            variable = self.variable(target)
            if variable is None:
                if isinstance(target, n.Index):
                    indexed.append(target)
                continue
            written.add(variable)
            explicit_nil = position < len(values) and isinstance(n.unparen(values[position]), n.Nil)
            if not explicit_nil and (position < len(values) or spread):
                self.flow.assigned.add(target)
                if variable in live:
                    self.flow.used.add(target)
        return (live - written) | self.reads([*values, *indexed])

    def variable(self, target: n.Node) -> Variable | None:
        variable = (
            self.scopes.declared.get(target)
            if isinstance(target, n.LocalName)
            else self.scopes.variable(target)
        )
        return variable if variable in self.tracked else None

    def variables(self, targets: Iterable[n.Node]) -> Live:
        return frozenset(v for v in map(self.variable, targets) if v is not None)

    def reads(self, nodes: Iterable[n.Node]) -> Live:
        """Tracked variables read by these expressions (not inside nested functions)."""
        found: set[Variable] = set()
        stack = list(nodes)
        while stack:
            node = stack.pop()
            if isinstance(node, n.Function):
                continue
            if isinstance(node, n.Name):
                variable = self.scopes.variable(node)
                if variable in self.tracked and not n.is_target(node):
                    found.add(variable)
            stack.extend(node.children())
        return frozenset(found)
