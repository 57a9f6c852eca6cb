"""The two required hooks, and scrun_before_start when there is one: defined, global, with
scrun's parameters in scrun's order.

scrun refuses to load the script when a hook is missing or not a function, so those are
errors. A wrong parameter list still loads (Lua drops or nil-fills arguments) but means the
script reads, say, `root_path` from the slot where scrun passes `orig_bundle`: a warning.
"""

from __future__ import annotations

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext, closest


def check_hooks(ctx: LintContext) -> None:
    candidates = {d.name: d.node for d in reversed(ctx.definitions) if d.func is not None}
    for hook in api.ALL_HOOKS:
        definitions = [d for d in ctx.hook_definitions if d.name == hook.name]
        if not definitions:
            if hook in api.OPTIONAL_HOOKS:
                continue
            match = closest(hook.name, candidates)
            hint = f"; did you mean '{match}' (line {candidates[match].line})?" if match else ""
            ctx.report_at(1, 1, "E501", f"required function '{hook.name}' is not defined{hint}")
            continue
        for definition in definitions:
            if not definition.is_global:
                ctx.report(
                    definition.node,
                    "E502",
                    f"'{hook.name}' is declared local: scrun calls the global one; remove 'local'",
                )
            elif ctx.value_kind(definition.value) not in (None, "function"):
                kind = ctx.value_kind(definition.value)
                ctx.report(
                    definition.node, "E502", f"'{hook.name}' is assigned a {kind}, not a function"
                )
            if definition.func is not None:
                check_parameters(ctx, hook, definition.func)


def check_parameters(ctx: LintContext, hook: api.Hook, func: n.Function) -> None:
    if func.is_vararg and not func.params:
        return
    names = [param.name for param in func.params]
    if len(names) != len(hook.params) and not func.is_vararg:
        ctx.report(
            func,
            "W503",
            f"'{hook.name}' takes {len(names)} parameters, scrun passes"
            f" {len(hook.params)}: ({', '.join(hook.params)})",
        )
    for position, param in enumerate(func.params):
        if param.name in hook.params and hook.params.index(param.name) != position:
            expected = hook.params.index(param.name) + 1
            ctx.report(
                param,
                "W504",
                f"parameter '{param.name}' is number {position + 1} but scrun"
                f" passes {param.name} as number {expected}",
            )
