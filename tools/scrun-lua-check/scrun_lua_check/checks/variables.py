"""The luacheck family: globals (W1xx), unused variables (W2xx), shadowing (W4xx).

scrun.lua runs in one Lua state for the whole container lifetime (the anchor inherits it), so
an accidental global written in stage_in is still there in stage_out: worth a warning, and a
misspelt global is usually a bug. Reads of a global that the script itself assigns somewhere
are not reported again as undefined (the W111 on the assignment already points at it).
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.analyses import Analyses
from scrun_lua_check.checks.commands import status_targets
from scrun_lua_check.context import (
    HOOK_NAMES,
    LintContext,
    closest,
    did_you_mean,
)
from scrun_lua_check.scope import Variable, VarKind

READ_ONLY = frozenset({"slurm"})


def check_globals(ctx: LintContext) -> None:
    known = ctx.lua.globals | READ_ONLY | HOOK_NAMES
    assigned = {
        name for name, accesses in ctx.scopes.globals.items() if any(a.write for a in accesses)
    }
    for name, accesses in ctx.scopes.globals.items():
        for access in accesses:
            if not access.write:
                if name not in known | assigned:
                    hint = newer_only(ctx, name) or did_you_mean(name, known | assigned)
                    ctx.report(access.node, "W113", f"accessing undefined variable '{name}'{hint}")
            elif name in ctx.lua.globals | READ_ONLY:
                ctx.report(access.node, "W121", f"setting read-only global variable '{name}'")
            elif name not in HOOK_NAMES and closest(name, HOOK_NAMES) is None:
                # (a misspelt hook is left to E501, which names it with the suggestion)
                ctx.report(
                    access.node,
                    "W111",
                    f"setting non-standard global variable '{name}'"
                    " (it stays set between hooks; declare it local)",
                )


def check_library_fields(ctx: LintContext) -> None:
    """`string.fromat(...)`: a misspelt standard function is nil and fails when called."""
    for node in ctx.all_nodes:
        if not isinstance(node, n.Index) or not isinstance(node.obj, n.Name) or n.is_target(node):
            continue
        fields = ctx.lua.library_fields.get(node.obj.name)
        key = ctx.scopes.global_index(node, node.obj.name)
        if fields is not None and key is not None and key not in fields:
            hint = newer_only(ctx, f"{node.obj.name}.{key}") or did_you_mean(key, fields)
            ctx.report(
                node.key,
                "W143",
                f"accessing undefined field '{key}' of global '{node.obj.name}'{hint}",
            )


def newer_only(ctx: LintContext, name: str) -> str:
    """The note for a standard name left out by --lua51, or an empty string."""
    if name in ctx.lua.newer_only:
        return " (Lua 5.2 and later only; Slurm's own scrun built against Lua 5.1 has none)"
    return ""


def check_unused(ctx: LintContext, analyses: Analyses) -> None:
    for variable in ctx.scopes.variables:
        if variable.reads or variable.name.startswith("_") or variable.attrib == "close":
            continue
        if variable.name in HOOK_NAMES or holds_command_status(analyses, variable):
            continue  # reported as E502 (a local hook) or W802 (status never read)
        what = f"{variable.kind.value} '{variable.name}'"
        if variable.kind is VarKind.ARG:
            if variable.scope.function not in ctx.hook_like_functions:
                ctx.report(variable.decl, "W212", f"unused {what}")
        elif variable.kind is VarKind.LOOP:
            ctx.report(variable.decl, "W213", f"unused {what}")
        elif variable.writes:
            ctx.report(variable.decl, "W231", f"{what} is set but never accessed")
        elif variable.kind is not VarKind.SELF:
            ctx.report(variable.decl, "W211", f"unused {what}")


def check_unused_values(ctx: LintContext, analyses: Analyses) -> None:
    """luacheck's W311: a value stored in a local that no path reads before it is overwritten
    or goes out of scope. Variables never read at all are W211/W231; command statuses W802."""
    skip = status_targets(analyses)
    for target in analyses.flow.assigned - analyses.flow.used:
        variable = ctx.assigned_variable(target)
        if variable is None or target in skip or not variable.reads:
            continue
        if variable.name.startswith("_") or variable.attrib == "close":
            continue
        command = output_of(analyses, target)
        what = (
            f"the OUTPUT of {command} stored in '{variable.name}' is never read afterwards"
            " (the command's messages are lost; log them when it fails)"
            if command is not None
            else f"value assigned to {variable.kind.value} '{variable.name}' is unused"
            " (overwritten or never read afterwards)"
        )
        ctx.report(target, "W311", what)


def output_of(analyses: Analyses, target: n.Node) -> str | None:
    """The command (as named in messages) whose OUTPUT, its second result, `target` receives."""
    assigned = n.assignment(target.parent)
    if assigned is None:
        return None
    targets, values = assigned
    position = next(i for i, t in enumerate(targets) if t is target)
    if not values or position != len(values):
        return None  # not the result right after the last value's first one
    return next((use.name for use in analyses.command_uses if use.call is values[-1]), None)


def holds_command_status(analyses: Analyses, variable: Variable) -> bool:
    return any(value in analyses.status_calls for value in variable.values)


def check_shadowing(ctx: LintContext) -> None:
    for shadowing in ctx.scopes.shadowings:
        variable, previous = shadowing.variable, shadowing.previous
        if variable.name.startswith("_"):
            continue
        where = f"{previous.kind.value} '{previous.name}' on line {previous.decl.line}"
        if shadowing.same_scope:
            ctx.report(variable.decl, "W411", f"redefining {where}")
        elif shadowing.upvalue:
            ctx.report(variable.decl, "W431", f"shadowing upvalue {where}")
        else:
            ctx.report(variable.decl, "W421", f"shadowing {where}")
