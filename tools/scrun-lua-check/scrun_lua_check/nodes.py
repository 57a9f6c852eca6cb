"""AST node types for Lua 5.4, each with the line and column where it starts.

Nodes compare by identity (`eq=False`), so analyses can key dictionaries and sets on them.
`link()` fills in each node's parent and enclosing function once after parsing, so checks can
ask "is this call a statement?" or "which function is this in?" without re-walking the tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields


@dataclass(eq=False)
class Node:
    line: int
    col: int
    parent: Node | None = field(default=None, init=False, repr=False)
    # Innermost enclosing function; None for code of the main chunk.
    function: Function | None = field(default=None, init=False, repr=False)

    def children(self) -> Iterator[Node]:
        """Direct child nodes in source order (parent and function links excluded)."""
        for item in fields(self):
            if item.name in ("parent", "function"):
                continue
            value = getattr(self, item.name)
            if isinstance(value, Node):
                yield value
            elif isinstance(value, list):
                for element in value:
                    if isinstance(element, Node):
                        yield element
                    elif isinstance(element, tuple):  # If clauses: (condition, block)
                        yield from (part for part in element if isinstance(part, Node))


# ---- expressions -------------------------------------------------------------------------


@dataclass(eq=False)
class Nil(Node):
    pass


@dataclass(eq=False)
class Boolean(Node):
    value: bool


@dataclass(eq=False)
class Number(Node):
    value: int | float


@dataclass(eq=False)
class String(Node):
    value: str


@dataclass(eq=False)
class Vararg(Node):
    pass


@dataclass(eq=False)
class Name(Node):
    name: str


@dataclass(eq=False)
class Index(Node):
    obj: Node
    key: Node
    dot: bool = False  # written as `obj.key` (key is then a String)


@dataclass(eq=False)
class Call(Node):
    func: Node
    args: list[Node]


@dataclass(eq=False)
class MethodCall(Node):
    obj: Node
    method: str
    args: list[Node]


@dataclass(eq=False)
class Paren(Node):
    expr: Node  # parentheses truncate a multi-value expression to one value


@dataclass(eq=False)
class BinOp(Node):
    op: str
    left: Node
    right: Node


@dataclass(eq=False)
class UnOp(Node):
    op: str
    operand: Node


@dataclass(eq=False)
class TableField(Node):
    key: Node | None  # None for positional entries; `name = v` has a String key
    value: Node


@dataclass(eq=False)
class Table(Node):
    entries: list[TableField]


@dataclass(eq=False)
class Param(Node):
    name: str
    implicit: bool = False  # the `self` of a `function a:b()` definition


@dataclass(eq=False)
class Function(Node):
    params: list[Param]
    is_vararg: bool
    body: Block
    end_line: int
    end_col: int
    name: str = "function"  # for messages: `slurm_scrun_stage_in`, `M.helper`, ...


# ---- statements --------------------------------------------------------------------------


@dataclass(eq=False)
class Block(Node):
    body: list[Node]


@dataclass(eq=False)
class LocalName(Node):
    name: str
    attrib: str | None = None  # `const` or `close`


@dataclass(eq=False)
class Local(Node):
    names: list[LocalName]
    values: list[Node]


@dataclass(eq=False)
class Assign(Node):
    targets: list[Node]  # Name or Index
    values: list[Node]


@dataclass(eq=False)
class CallStat(Node):
    call: Node  # Call or MethodCall


@dataclass(eq=False)
class Do(Node):
    body: Block


@dataclass(eq=False)
class While(Node):
    cond: Node
    body: Block


@dataclass(eq=False)
class Repeat(Node):
    body: Block
    cond: Node


@dataclass(eq=False)
class If(Node):
    clauses: list[tuple[Node, Block]]  # `if` and each `elseif`
    orelse: Block | None


@dataclass(eq=False)
class NumericFor(Node):
    var: LocalName
    start: Node
    stop: Node
    step: Node | None
    body: Block


@dataclass(eq=False)
class GenericFor(Node):
    names: list[LocalName]
    exprs: list[Node]
    body: Block


@dataclass(eq=False)
class FunctionStat(Node):
    target: Node  # Name or Index chain; for `a.b:c` the Index for `c` with is_method
    is_method: bool
    func: Function


@dataclass(eq=False)
class LocalFunction(Node):
    name: LocalName
    func: Function


@dataclass(eq=False)
class Return(Node):
    values: list[Node]


@dataclass(eq=False)
class Break(Node):
    pass


@dataclass(eq=False)
class Goto(Node):
    label: str


@dataclass(eq=False)
class Label(Node):
    name: str


@dataclass(eq=False)
class Chunk(Node):
    body: Block


LOOPS = (While, Repeat, NumericFor, GenericFor)
# Expressions that may yield any number of values (last in a list, all of them count).
MULTI_VALUE = (Call, MethodCall, Vararg)


def walk(node: Node) -> Iterator[Node]:
    """All nodes below and including `node`, in source order."""
    yield node
    for child in node.children():
        yield from walk(child)


def link(chunk: Chunk) -> None:
    """Set `parent` and `function` on every node of the tree."""
    stack: list[tuple[Node, Function | None]] = [(chunk, None)]
    while stack:
        node, function = stack.pop()
        inner = node if isinstance(node, Function) else function
        for child in node.children():
            child.parent = node
            child.function = inner
            stack.append((child, inner))


def static_string(node: Node) -> str | None:
    """The value of a string literal (parenthesised or not), else None."""
    node = unparen(node)
    return node.value if isinstance(node, String) else None


def assignment(statement: Node | None) -> tuple[list[Node], list[Node]] | None:
    """(targets, values) of `local a, b = ...` or `a, b = ...`; None for any other node."""
    if isinstance(statement, Local):
        return list(statement.names), statement.values
    if isinstance(statement, Assign):
        return statement.targets, statement.values
    return None


def is_target(node: Node) -> bool:
    """Whether `node` is assigned to (an assignment target or a `function a.b()` name)."""
    parent = node.parent
    if isinstance(parent, Assign):
        return any(target is node for target in parent.targets)
    return isinstance(parent, FunctionStat) and parent.target is node


def unparen(node: Node) -> Node:
    while isinstance(node, Paren):
        node = node.expr
    return node


def describe(node: Node) -> str:
    """Short source-like text of an expression for messages (`mount["source"]`, `f(...)`)."""
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Index):
        key = static_string(node.key)
        if node.dot and key is not None:
            return f"{describe(node.obj)}.{key}"
        inner = f'"{key}"' if key is not None else describe(node.key)
        return f"{describe(node.obj)}[{inner}]"
    if isinstance(node, Call):
        return f"{describe(node.func)}(...)"
    if isinstance(node, MethodCall):
        return f"{describe(node.obj)}:{node.method}(...)"
    if isinstance(node, Paren):
        return f"({describe(node.expr)})"
    if isinstance(node, String):
        return repr(node.value)
    if isinstance(node, Number):
        return str(node.value)
    if isinstance(node, BinOp):
        return f"{describe(node.left)} {node.op} {describe(node.right)}"
    return "expression"
