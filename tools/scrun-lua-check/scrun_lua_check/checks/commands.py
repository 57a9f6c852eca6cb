"""Results of slurm.remote_command / slurm.allocator_command that nobody looks at.

Both return (STATUS, OUTPUT) and never raise when the command fails, so a script that does
not read STATUS carries on after a failed mkdir or rsync as if it had worked. The same holds
for the script's own wrapper that returns their STATUS (scrun_lua_check.wrappers).
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.analyses import Analyses
from scrun_lua_check.context import LintContext
from scrun_lua_check.scope import read_later
from scrun_lua_check.wrappers import status_destination


def check_command_results(ctx: LintContext, analyses: Analyses) -> None:
    for use in analyses.command_uses:
        if not use.status:
            continue
        how, target = status_destination(use.call)
        if how == "ignored":
            ctx.report(
                use.call, "W801", f"the result of {use.name} is ignored: check its exit status"
            )
        elif how == "discarded":
            ctx.report(
                use.call, "W801", f"the result of {use.name} is discarded: check its exit status"
            )
        elif isinstance(target, (n.Name, n.LocalName)) and not status_read(ctx, analyses, target):
            ctx.report(
                use.call,
                "W802",
                f"the exit status of {use.name} is stored in '{target.name}'"
                " but never read afterwards",
            )


def status_targets(analyses: Analyses) -> set[n.Node]:
    """Targets that receive the STATUS of a command (W802 speaks for them)."""
    targets: set[n.Node] = set()
    for call in analyses.status_calls:
        how, target = status_destination(call)
        if how == "stored" and target is not None:
            targets.add(target)
    return targets


def status_read(ctx: LintContext, analyses: Analyses, target: n.Name | n.LocalName) -> bool:
    """Whether the value stored into `target` can be read later (`_`-names mean 'ignored')."""
    if target.name.startswith("_"):
        return True
    if analyses.flow.tracks(target):
        return analyses.flow.is_used(target)
    if isinstance(target, n.LocalName):
        return bool(ctx.scopes.declared[target].reads)
    accesses = ctx.scopes.accesses_of(target)
    write = next(access for access in accesses if access.node is target)
    return read_later(write, accesses)
