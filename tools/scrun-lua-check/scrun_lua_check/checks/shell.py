"""Values spliced unquoted into command strings that a shell runs.

remote_command/allocator_command run their argument with `/bin/sh -c`, as do os.execute and
io.popen. A path spliced in with `..` or `string.format("%s")` is split at spaces and
interprets `;`, `$(...)` and quotes: a bundle path with a space breaks the rsync, a crafted one
runs another command. The rule is deliberately simple (a warning, not an error):

* literals, numbers (`%d`, `math.floor(x)`, arithmetic) and locals that only ever hold
  literals are safe;
* a value between quote characters (`'%s'`, `"'" .. x .. "'"`) counts as quoted;
* a call of a function whose name contains `quote` or `escape` counts as quoting;
* when the whole argument is a local variable, the values assigned to it are examined.
"""

from __future__ import annotations

import re

from scrun_lua_check import nodes as n
from scrun_lua_check.context import Context

QUOTING_FUNCTION = re.compile("quote|escape", re.IGNORECASE)
FORMAT_SPEC = re.compile(r"%[-+ #0]*[0-9]*(?:\.[0-9]*)?([a-zA-Z%])")
STRING_SPECS = frozenset("sq")
QUOTES = "'\""
MAX_FOLLOW = 3  # how many `local cmd = ...` hops to follow from the argument


def check_shell_splices(ctx: Context) -> None:
    for call in ctx.calls():
        name = ctx.command_call(call)
        if name is None or not isinstance(call, n.Call) or not call.args:
            continue
        # The slurm commands use their last argument; os.execute and io.popen their first.
        command = call.args[-1] if name.startswith("slurm.") else call.args[0]
        spliced: dict[str, None] = {}
        for node in command_splices(ctx, command, 0):
            spliced.setdefault(f"'{n.describe(node)}'")
        if spliced:
            ctx.report(
                call,
                "W803",
                f"{', '.join(spliced)} spliced unquoted into the shell"
                f" command of {name}(): quote or validate it (a space or ';' in the value"
                " changes the command)",
            )


def command_splices(ctx: Context, expr: n.Node, depth: int) -> list[n.Node]:
    """Unquoted non-constant parts the command string `expr` is built from."""
    expr = n.unparen(expr)
    if isinstance(expr, n.Name):
        variable = ctx.scopes.variable(expr)
        if variable is None or depth >= MAX_FOLLOW:
            return []  # a command built elsewhere: nothing to see here
        return [
            part for value in variable.values for part in command_splices(ctx, value, depth + 1)
        ]
    if isinstance(expr, n.BinOp) and expr.op in ("and", "or"):
        return command_splices(ctx, expr.left, depth) + command_splices(ctx, expr.right, depth)
    if is_concat(expr) or format_call(ctx, expr) is not None:
        return operand_splices(ctx, expr)
    return []


def operand_splices(ctx: Context, expr: n.Node) -> list[n.Node]:
    """Like command_splices, for a value that is itself spliced into a command."""
    expr = n.unparen(expr)
    if is_safe(ctx, expr):
        return []
    if is_concat(expr):
        parts = concat_operands(expr)
        found: list[n.Node] = []
        for index, part in enumerate(parts):
            before = n.static_string(parts[index - 1]) if index > 0 else None
            after = n.static_string(parts[index + 1]) if index + 1 < len(parts) else None
            if not quoted(before or "", after or ""):
                found.extend(operand_splices(ctx, part))
        return found
    formatted = format_call(ctx, expr)
    if formatted is not None:
        return format_splices(ctx, *formatted)
    if isinstance(expr, n.BinOp) and expr.op in ("and", "or"):
        return operand_splices(ctx, expr.left) + operand_splices(ctx, expr.right)
    return [expr]


def format_splices(ctx: Context, template: n.Node, args: list[n.Node]) -> list[n.Node]:
    text = n.static_string(template)
    if text is None:  # format string not known: every argument may be spliced
        return [part for arg in args for part in operand_splices(ctx, arg)]
    found: list[n.Node] = []
    remaining = iter(args)
    for match in FORMAT_SPEC.finditer(text):
        if match.group(1) == "%":
            continue
        arg = next(remaining, None)
        if arg is None:
            break
        surrounding = quoted(text[: match.start()], text[match.end() :])
        if match.group(1) in STRING_SPECS and not surrounding:
            found.extend(operand_splices(ctx, arg))
    return found


def is_safe(ctx: Context, expr: n.Node) -> bool:
    if isinstance(expr, (n.String, n.Number)) or ctx.value_kind(expr) == "number":
        return True
    if isinstance(expr, n.Call) and QUOTING_FUNCTION.search(n.describe(expr.func)):
        return True
    if isinstance(expr, n.MethodCall) and QUOTING_FUNCTION.search(expr.method):
        return True
    variable = ctx.scopes.variable(expr)
    return (
        variable is not None
        and bool(variable.values)
        and not variable.writes
        and all(isinstance(n.unparen(value), (n.String, n.Number)) for value in variable.values)
    )


def quoted(before: str, after: str) -> bool:
    return bool(before) and bool(after) and before[-1] in QUOTES and after[0] == before[-1]


def is_concat(expr: n.Node) -> bool:
    return isinstance(expr, n.BinOp) and expr.op == ".."


def concat_operands(expr: n.Node) -> list[n.Node]:
    """`a .. (b .. c) .. d` as [a, b, c, d]."""
    expr = n.unparen(expr)
    if isinstance(expr, n.BinOp) and expr.op == "..":
        return concat_operands(expr.left) + concat_operands(expr.right)
    return [expr]


def format_call(ctx: Context, expr: n.Node) -> tuple[n.Node, list[n.Node]] | None:
    """(format string, arguments) of `string.format(f, ...)` or `f:format(...)`."""
    if ctx.library_call(expr) == ("string", "format") and isinstance(expr, n.Call) and expr.args:
        return expr.args[0], expr.args[1:]
    if isinstance(expr, n.MethodCall) and expr.method == "format":
        return expr.obj, expr.args
    return None
