"""Results of slurm.remote_command / slurm.allocator_command that nobody looks at.

Both return (STATUS, OUTPUT) and never raise when the command fails, so a script that does
not read STATUS carries on after a failed mkdir or rsync as if it had worked.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.context import SLURM_COMMANDS, Context
from scrun_lua_check.scope import read_later


def check_command_results(ctx: Context) -> None:
    for call in ctx.calls():
        if ctx.slurm_function(call) not in SLURM_COMMANDS:
            continue
        name = ctx.command_call(call)
        node: n.Node = call
        while isinstance(node.parent, n.Paren):
            node = node.parent
        statement = node.parent
        if isinstance(statement, n.CallStat):
            ctx.report(call, "W801", f"the result of {name}() is ignored: check its exit status")
            continue
        if isinstance(statement, n.Local):
            targets: list[n.Node] = list(statement.names)
            values = statement.values
        elif isinstance(statement, n.Assign):
            targets, values = statement.targets, statement.values
        else:
            continue  # used inside an expression, returned, or passed on
        position = next(i for i, value in enumerate(values) if value is node)
        if position >= len(targets):
            ctx.report(call, "W801", f"the result of {name}() is discarded: check its exit status")
            continue
        target = targets[position]  # a table field target may be read anywhere: not checked
        if isinstance(target, (n.Name, n.LocalName)) and not status_read(ctx, target):
            ctx.report(
                call,
                "W802",
                f"the exit status of {name}() is stored in '{target.name}'"
                " but never read afterwards",
            )


def status_read(ctx: Context, target: n.Name | n.LocalName) -> bool:
    """Whether the value stored into `target` can be read later (`_`-names mean 'ignored')."""
    if target.name.startswith("_"):
        return True
    if isinstance(target, n.LocalName):
        return bool(ctx.scopes.declared[target].reads)
    accesses = ctx.scopes.accesses_of(target)
    write = next(access for access in accesses if access.node is target)
    return read_later(write, accesses)
