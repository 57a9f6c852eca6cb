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
        how, target = status_destination(call)
        if how == "ignored":
            ctx.report(call, "W801", f"the result of {name}() is ignored: check its exit status")
        elif how == "discarded":
            ctx.report(call, "W801", f"the result of {name}() is discarded: check its exit status")
        elif isinstance(target, (n.Name, n.LocalName)) and not status_read(ctx, target):
            ctx.report(
                call,
                "W802",
                f"the exit status of {name}() is stored in '{target.name}'"
                " but never read afterwards",
            )


def status_destination(call: n.Node) -> tuple[str, n.Node | None]:
    """Where a call's first result goes: ("ignored", None) for a call statement,
    ("discarded", None) when an assignment has no target for it, ("stored", target), or
    ("used", None) inside an expression, returned or passed on."""
    node: n.Node = call
    while isinstance(node.parent, n.Paren):
        node = node.parent
    statement = node.parent
    if isinstance(statement, n.CallStat):
        return "ignored", None
    if isinstance(statement, n.Local):
        targets: list[n.Node] = list(statement.names)
        values = statement.values
    elif isinstance(statement, n.Assign):
        targets, values = statement.targets, statement.values
    else:
        return "used", None
    position = next(i for i, value in enumerate(values) if value is node)
    if position >= len(targets):
        return "discarded", None
    return "stored", targets[position]


def status_targets(ctx: Context) -> set[n.Node]:
    """Targets that receive the STATUS of a command (W802 speaks for them)."""
    found: set[n.Node] = set()
    for call in ctx.calls():
        if ctx.slurm_function(call) in SLURM_COMMANDS:
            how, target = status_destination(call)
            if how == "stored" and target is not None:
                found.add(target)
    return found


def status_read(ctx: Context, target: n.Name | n.LocalName) -> bool:
    """Whether the value stored into `target` can be read later (`_`-names mean 'ignored')."""
    if target.name.startswith("_"):
        return True
    if ctx.flow.tracks(target):
        return ctx.flow.is_used(target)
    if isinstance(target, n.LocalName):
        return bool(ctx.scopes.declared[target].reads)
    accesses = ctx.scopes.accesses_of(target)
    write = next(access for access in accesses if access.node is target)
    return read_later(write, accesses)
