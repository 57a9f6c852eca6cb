"""Values spliced into command strings that a shell runs, where the shell may misread them.

remote_command/allocator_command run their argument with `/bin/sh -c`, as do os.execute and
io.popen. A path spliced in with `..` or `string.format("%s")` is split at spaces and
interprets `;`, `$(...)` and quotes: a bundle path with a space breaks the rsync, a crafted
one runs another command. What counts as safe, quoted or not is scrun_lua_check.commandtext;
calls through the script's own wrappers are checked at the wrapper's call
(scrun_lua_check.wrappers). Each call gets one warning that says what is wrong with each value.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.analyses import Analyses
from scrun_lua_check.commandtext import DOUBLE_QUOTED, LUA_QUOTED, UNQUOTED, analyse
from scrun_lua_check.context import LintContext

SAFE_FORM = "single quotes with each ' written as '\\'' (a shell_quote() helper)"
WHY = {
    UNQUOTED: "spliced unquoted into the shell command of {call}: a space, ';', '$(...)'"
    " or a quote in the value changes the command; quote it with " + SAFE_FORM,
    DOUBLE_QUOTED: "spliced inside double quotes into the shell command of {call}:"
    " '$(...)', backticks, '$VAR' and '\\' still work there; use " + SAFE_FORM,
    LUA_QUOTED: "spliced with %q into the shell command of {call}: %q quotes for Lua, not"
    " for the shell ('$(...)' and backticks still run, a newline is dropped); use " + SAFE_FORM,
}


def check_shell_splices(ctx: LintContext, analyses: Analyses) -> None:
    for use in analyses.command_uses:
        found: dict[str, dict[str, None]] = {}
        for command in use.commands:
            for node, problem in analyse(ctx, command).problems:
                found.setdefault(problem, {}).setdefault(f"'{n.describe(node)}'")
        if found:
            message = "; ".join(
                f"{', '.join(names)} {WHY[problem].format(call=use.name)}"
                for problem, names in found.items()
            )
            ctx.report(use.call, "W803", message)
