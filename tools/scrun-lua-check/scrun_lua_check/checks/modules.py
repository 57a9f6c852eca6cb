"""`require` targets that cannot be loaded: scrun's load (or the hook) would fail.

scrun provides `json` and `cjson` itself; anything else must be on the Lua search path. The
answer is that of the machine the checker runs on, which should be one where scrun runs.
"""

from __future__ import annotations

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext


def check_requires(ctx: LintContext) -> None:
    for call in ctx.calls():
        if ctx.global_call(call) != "require" or not isinstance(call, n.Call) or not call.args:
            continue
        module = n.static_string(call.args[0])
        if module is not None and ctx.lua.find_module(module) is None:
            provided = " and ".join(api.JSON_MODULES)
            ctx.report(
                call,
                "E901",
                f"module '{module}' cannot be loaded: scrun provides only"
                f" {provided}, and it is not on package.path/package.cpath of"
                f" {ctx.lua.version} here",
            )
