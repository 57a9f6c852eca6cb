"""Failures a script has no way to notice: a helper's failure result ignored (W805), a table
field indexed without the nil check the script itself uses elsewhere (W806).

The man page's example has both: `write_file(dst_config, ...)` returns nil when the file
cannot be opened, and its caller ignores that, so stage_in returns success with no
config.json written; and `config["process"]` is checked for nil twice but indexed without a
check before `["env"]`, so a bundle without `process` fails with "attempt to index a nil
value" instead of being handled.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.analyses import Analyses
from scrun_lua_check.checks.returns import terminates
from scrun_lua_check.context import LintContext
from scrun_lua_check.scope import Variable

# A path of static keys from a variable: `config["process"]["env"]` is (config, "process", "env").
Path = tuple[Variable | str, ...]


def check_ignored_failures(ctx: LintContext, analyses: Analyses) -> None:
    wrapped = {use.call for use in analyses.command_uses}  # W801 speaks for those
    for node in ctx.all_nodes:
        if not isinstance(node, n.CallStat) or not isinstance(node.call, n.Call):
            continue
        call = node.call
        function = ctx.called_function(call) if call not in wrapped else None
        failure = failure_return(function) if function is not None else None
        if failure is None:
            continue
        name = n.describe(call.func)
        ctx.report(
            call,
            "W805",
            f"the result of {name}() is ignored, but it returns"
            f" {failure_value(failure)} when it fails (line {failure.line}):"
            f" check it, or make {name}() raise an error",
        )


def failure_return(function: n.Function) -> n.Return | None:
    """The first `return nil` / `return false` (maybe with a message) of `function` itself:
    how it says that it failed. A bare `return` is not counted (an early exit)."""
    for node in n.walk(function.body):
        if isinstance(node, n.Return) and node.function is function and node.values:
            first = n.unparen(node.values[0])
            if isinstance(first, n.Nil) or (isinstance(first, n.Boolean) and not first.value):
                return node
    return None


def failure_value(failure: n.Return) -> str:
    return "nil" if isinstance(n.unparen(failure.values[0]), n.Nil) else "false"


def check_nil_checks(ctx: LintContext) -> None:
    checked = nil_checked(ctx)
    reported: set[tuple[n.Function | None, Path]] = set()
    for node in ctx.all_nodes:
        if not isinstance(node, n.Index):
            continue
        path = path_of(ctx, node.obj)
        if path is None or path not in checked or (node.function, path) in reported:
            continue
        if guarded(ctx, node, path):
            continue
        reported.add((node.function, path))
        described = n.describe(node.obj)
        ctx.report(
            node,
            "W806",
            f"{described} is indexed here without the nil check the script makes on line"
            f" {checked[path]}: when it is nil this raises 'attempt to index a nil value'"
            f" and the hook fails; check {described} first",
        )


def path_of(ctx: LintContext, node: n.Node) -> Path | None:
    """The key path of `a.b["c"]` (a local or global `a`, static keys), else None."""
    node = n.unparen(node)
    if isinstance(node, n.Name):
        variable = ctx.scopes.variable(node)
        return (variable if variable is not None else node.name,)
    if isinstance(node, n.Index):
        key = n.static_string(node.key)
        base = path_of(ctx, node.obj)
        return None if key is None or base is None else (*base, key)
    return None


def tested(ctx: LintContext, cond: n.Node) -> list[tuple[Path, bool]]:
    """The fields `cond` tests for nil: (path, True when `cond` being true means non-nil)."""
    cond = n.unparen(cond)
    if isinstance(cond, n.BinOp) and cond.op in ("==", "~="):
        other = None
        if isinstance(n.unparen(cond.right), n.Nil):
            other = cond.left
        elif isinstance(n.unparen(cond.left), n.Nil):
            other = cond.right
        path = path_of(ctx, other) if other is not None else None
        return [(path, cond.op == "~=")] if path is not None and len(path) > 1 else []
    if isinstance(cond, n.UnOp) and cond.op == "not":
        return [(path, not non_nil) for path, non_nil in tested(ctx, cond.operand)]
    if isinstance(cond, n.BinOp) and cond.op in ("and", "or"):
        return tested(ctx, cond.left) + tested(ctx, cond.right)
    path = path_of(ctx, cond)
    return [(path, True)] if path is not None and len(path) > 1 else []


def conditions(node: n.Node) -> list[n.Node]:
    if isinstance(node, n.If):
        return [cond for cond, _ in node.clauses]
    if isinstance(node, (n.While, n.Repeat)):
        return [node.cond]
    if isinstance(node, n.BinOp) and node.op in ("and", "or"):
        return [node.left]
    return []


def nil_checked(ctx: LintContext) -> dict[Path, int]:
    """Every field the script compares with nil or tests for truth, with the first line."""
    found: dict[Path, int] = {}
    for node in ctx.all_nodes:
        for cond in conditions(node):
            for path, _ in tested(ctx, cond):
                found.setdefault(path, cond.line)
    return found


def implies(ctx: LintContext, cond: n.Node, path: Path, non_nil: bool) -> bool:
    """Whether `cond` being true means the field at `path` is non-nil (or nil)."""
    cond = n.unparen(cond)
    if isinstance(cond, n.BinOp) and cond.op == ("and" if non_nil else "or"):
        return implies(ctx, cond.left, path, non_nil) or implies(ctx, cond.right, path, non_nil)
    return any(tested_path == path and way == non_nil for tested_path, way in tested(ctx, cond))


def guarded(ctx: LintContext, index: n.Index, path: Path) -> bool:
    """Whether the code around `index` makes sure the field at `path` is not nil there."""
    child: n.Node = index
    parent = index.parent
    while parent is not None and not isinstance(parent, n.Function):
        if isinstance(parent, n.BinOp) and child is parent.right:
            if implies(ctx, parent.left, path, non_nil=parent.op == "and"):
                return True
        elif isinstance(parent, n.If) and guarded_branch(ctx, parent, child, path):
            return True
        elif isinstance(parent, n.While) and child is parent.body:
            if implies(ctx, parent.cond, path, non_nil=True):
                return True
        elif isinstance(parent, n.Block):
            position = next(i for i, statement in enumerate(parent.body) if statement is child)
            if any(settles(ctx, statement, path) for statement in parent.body[:position]):
                return True
        child, parent = parent, parent.parent
    return False


def guarded_branch(ctx: LintContext, statement: n.If, child: n.Node, path: Path) -> bool:
    """Whether being in `child` (a branch, or a later condition) of `statement` means that
    the field at `path` is not nil."""
    for cond, block in statement.clauses:
        if block is child:
            return implies(ctx, cond, path, non_nil=True)
        if cond is child:
            return False
        if implies(ctx, cond, path, non_nil=False):
            return True  # that branch took the nil case
    return False


def settles(ctx: LintContext, statement: n.Node, path: Path) -> bool:
    """Whether after `statement` the field at `path` is surely set: it is assigned, or an
    `if <nil> then ... end` that assigns it or leaves the function, or an `assert`."""
    if isinstance(statement, n.Assign):
        return any(path_of(ctx, target) == path for target in statement.targets)
    if isinstance(statement, n.If) and len(statement.clauses) == 1:
        cond, block = statement.clauses[0]
        return implies(ctx, cond, path, non_nil=False) and (
            terminates(ctx, block) or any(settles(ctx, s, path) for s in block.body)
        )
    if isinstance(statement, n.CallStat) and ctx.global_call(statement.call) == "assert":
        call = statement.call
        return (
            isinstance(call, n.Call)
            and bool(call.args)
            and implies(ctx, call.args[0], path, non_nil=True)
        )
    return False
