"""Return values: each hook returns a number on every path; the chunk returns slurm.SUCCESS.

scrun treats a non-numeric hook result as success after logging "non-numeric return code",
so a path that falls off the end hides a failure the author meant to report. The chunk's own
result decides whether the script loads at all: non-zero is fatal for `scrun create`.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.context import SLURM_CONSTANTS, LintContext


def terminates(ctx: LintContext, block: n.Block) -> bool:
    """Whether running `block` surely ends the function (return, error(), os.exit()).

    `goto` counts as ending it: the checker does not follow jumps and would rather stay
    silent than warn about a path that does not exist. `break` leaves only the loop.
    """
    for statement in block.body:
        if isinstance(statement, n.Break):
            return False
        if statement_terminates(ctx, statement):
            return True
    return False


def statement_terminates(ctx: LintContext, statement: n.Node) -> bool:
    if isinstance(statement, (n.Return, n.Goto)):
        return True
    if isinstance(statement, n.CallStat):
        return ctx.global_call(statement.call) == "error" or ctx.library_call(statement.call) == (
            "os",
            "exit",
        )
    if isinstance(statement, n.Do):
        return terminates(ctx, statement.body)
    if isinstance(statement, n.If):
        branches = [block for _, block in statement.clauses]
        return statement.orelse is not None and all(
            terminates(ctx, block) for block in [*branches, statement.orelse]
        )
    if isinstance(statement, n.While):
        return literal_truth(statement.cond) is True and not has_break(statement.body)
    if isinstance(statement, n.Repeat):
        forever = literal_truth(statement.cond) is False and not has_break(statement.body)
        return forever or terminates(ctx, statement.body)
    return False


def literal_truth(node: n.Node) -> bool | None:
    """Truth of a literal condition (`while true`, `until false`); None when not a literal."""
    node = n.unparen(node)
    if isinstance(node, n.Nil):
        return False
    if isinstance(node, n.Boolean):
        return node.value
    return True if isinstance(node, (n.Number, n.String, n.Table, n.Function)) else None


def has_break(block: n.Node) -> bool:
    """Whether a `break` leaves this loop body (breaks of nested loops do not count)."""
    for child in block.children():
        if isinstance(child, n.Break):
            return True
        if not isinstance(child, (*n.LOOPS, n.Function)) and has_break(child):
            return True
    return False


def constant_number(ctx: LintContext, node: n.Node) -> int | float | None:
    node = n.unparen(node)
    if isinstance(node, n.Number):
        return node.value
    if isinstance(node, n.UnOp) and node.op == "-":
        inner = constant_number(ctx, node.operand)
        return None if inner is None else -inner
    name = ctx.scopes.global_index(node, "slurm")
    return SLURM_CONSTANTS.get(name) if name is not None else None


def check_hook_returns(ctx: LintContext) -> None:
    for func, hook in ctx.hook_functions.items():
        if not terminates(ctx, func.body):
            ctx.report_at(
                func.end_line,
                func.end_col,
                "W601",
                f"'{hook}' can reach its end"
                " without returning a number (scrun then logs 'non-numeric return"
                " code' and counts it as success)",
            )
    for node in ctx.all_nodes:
        owner = ctx.hook_of(node)
        if not isinstance(node, n.Return) or owner is None:
            continue
        kind = ctx.value_kind(node.values[0]) if node.values else "nothing"
        if kind not in (None, "number"):
            article = "" if kind in ("nothing", "nil") else "a "
            ctx.report(
                node,
                "W602",
                f"'{owner}' returns {article}{kind}, not a number (scrun"
                " logs 'non-numeric return code' and counts it as success)",
            )


def always_runs(node: n.Node) -> bool:
    """Whether a statement of the main chunk runs whenever the chunk runs to it: it is not
    inside an `if`, a loop or a function (only `do` blocks may enclose it)."""
    parent = node.parent
    while isinstance(parent, (n.Block, n.Do)):
        parent = parent.parent
    return isinstance(parent, n.Chunk)


def check_chunk_return(ctx: LintContext) -> None:
    """A return that always runs decides whether the script loads; a conditional one is the
    script refusing to load on purpose (its own setup failed) and is left alone."""
    returns = [node for node in ctx.all_nodes if isinstance(node, n.Return) and always_runs(node)]
    for node in returns:
        if not node.values or ctx.value_kind(node.values[0]) == "nil":
            continue
        value = constant_number(ctx, node.values[0])
        if value is None:
            ctx.report(
                node,
                "W604",
                f"the script returns '{n.describe(node.values[0])}': scrun"
                " refuses to load it unless that is 0; return slurm.SUCCESS",
            )
        elif value != 0:
            ctx.report(
                node,
                "E603",
                f"the script returns {value}: scrun refuses to load a"
                " script whose chunk returns non-zero; return slurm.SUCCESS",
            )
    if not terminates(ctx, ctx.chunk.body):
        last = ctx.chunk.body.body[-1] if ctx.chunk.body.body else ctx.chunk
        ctx.report(last, "W604", "the script does not end with 'return slurm.SUCCESS'")
