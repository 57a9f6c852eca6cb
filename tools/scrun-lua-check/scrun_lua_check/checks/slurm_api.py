"""Uses of the `slurm` table: only names that exist, called with a plausible argument count.

A misspelt `slurm.*` name is nil: calling it raises a Lua error (the hook fails), reading it
silently yields nil (`return slurm.SUCESS` returns nil, which counts as success). The table of
what exists is scrunlib.lua.api, the same one the runtime builds the table from.
"""

from __future__ import annotations

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.context import SLURM_FIELD_KINDS, LintContext, did_you_mean


def check_slurm_uses(ctx: LintContext) -> None:
    for node in ctx.all_nodes:
        if isinstance(node, n.MethodCall) and ctx.scopes.is_global(node.obj, "slurm"):
            ctx.report(
                node,
                "E701",
                f"slurm:{node.method}() passes the slurm table as first"
                f" argument; call slurm.{node.method}()",
            )
            continue
        key = ctx.scopes.global_index(node, "slurm")
        if key is None or n.is_target(node):
            continue
        parent = node.parent
        if isinstance(parent, n.Call) and parent.func is node:
            check_call(ctx, parent, key)
        elif key not in SLURM_FIELD_KINDS:
            hint = did_you_mean(key, SLURM_FIELD_KINDS)
            ctx.report(node, "E702", f"slurm.{key} does not exist (it is nil){hint}")


def check_call(ctx: LintContext, call: n.Call, key: str) -> None:
    function = api.FUNCTIONS.get(key)
    if function is None:
        if key in SLURM_FIELD_KINDS:
            ctx.report(call, "E701", f"slurm.{key} is a constant, not a function")
        else:
            hint = did_you_mean(key, api.FUNCTIONS)
            ctx.report(call, "E701", f"slurm.{key} is not a function scrun provides{hint}")
        return
    count = len(call.args)
    open_ended = bool(call.args) and isinstance(call.args[-1], n.MULTI_VALUE)
    fixed = count - 1 if open_ended else count
    expected = describe_arity(function)
    if not open_ended and count < function.min_args:
        ctx.report(
            call,
            "E703",
            f"slurm.{key}() called with {count} argument{'s' * (count != 1)}, expects {expected}",
        )
    elif function.max_args is not None and fixed > function.max_args:
        ctx.report(
            call,
            "W704",
            f"slurm.{key}() called with {fixed} arguments, expects"
            f" {expected}; the extra ones are ignored",
        )
    if key == "log" and call.args and ctx.value_kind(call.args[0]) == "string":
        ctx.report(
            call,
            "W705",
            "slurm.log takes the level first: slurm.log(LEVEL, MSG); the"
            " man page has it backwards and Slurm's scrun then logs the level, not the"
            " message",
        )
    if key == "log_user":
        ctx.report(
            call,
            "W706",
            "slurm.log_user raises an error in Slurm's scrun (it calls"
            " slurm.user_msg, which scrun does not define); use slurm.log_info",
        )


def describe_arity(function: api.Function) -> str:
    if function.max_args is None:
        return f"at least {function.min_args}"
    if function.max_args == function.min_args:
        return str(function.min_args)
    return f"{function.min_args} to {function.max_args}"
