"""What the checks compute over a script's facts, once, and share.

The lint context (scrun_lua_check.context) holds the facts: the tree, the scopes, the Lua
environment and the lookups a check asks of them. The analyses built on top of those facts
(which local values may be read; which calls run a shell command, through which wrappers)
live here, built once per script before the checks run, so the facts never depend on the
analyses that read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext
from scrun_lua_check.flow import ValueFlow, value_flow
from scrun_lua_check.wrappers import CommandUse, command_uses


@dataclass(frozen=True)
class Analyses:
    flow: ValueFlow  # which values assigned to locals may be read (scrun_lua_check.flow)
    command_uses: tuple[CommandUse, ...]  # every call that runs a shell command, or a wrapper
    status_calls: frozenset[n.Call]  # calls whose first result is a command's exit status


def analyse_script(ctx: LintContext) -> Analyses:
    functions = [node for node in ctx.all_nodes if isinstance(node, n.Function)]
    uses = tuple(command_uses(ctx))
    return Analyses(
        flow=value_flow(ctx.chunk, ctx.scopes, functions),
        command_uses=uses,
        status_calls=frozenset(use.call for use in uses if use.status),
    )
