"""Calls whose effect depends on where they run: the chunk's top level or a hook.

The chunk runs on every `scrun create`, before any job exists, and its stdout is the one the
container engine (podman, docker) reads from its runtime; the hooks run in the anchor, whose
stdout is the container's. So: no commands and no print at the top level (nor commands
whose point is to print, anywhere), and never os.exit.
"""

from __future__ import annotations

import os

from scrun_lua_check import nodes as n
from scrun_lua_check.analyses import Analyses
from scrun_lua_check.commandtext import Text, pieces
from scrun_lua_check.context import LintContext

TOP_LEVEL_PRINT = (
    "print() at the top level writes to the output of `scrun create`, which the"
    " container engine reads; use slurm.log_info"
)
HOOK_PRINT = (
    "print() output ends up in the container's output when it runs in a hook; use slurm.log_info"
)

# Commands whose point is to print: run by os.execute, their output goes where print's does.
PRINTING_COMMANDS = frozenset(
    {"echo", "printf", "cat", "ls", "env", "id", "date", "pwd", "whoami", "hostname"}
)


def check_placement(ctx: LintContext, analyses: Analyses) -> None:
    check_calls(ctx)
    for use in analyses.command_uses:
        if ctx.command_call(use.call) != "os.execute":  # a direct call, not through a wrapper
            continue
        program = printing_program(ctx, use.commands[0])
        if program is not None:
            where = (
                "the output of `scrun create`, which the container engine reads"
                if use.call.function is None
                else "the container's output when it runs in a hook"
            )
            ctx.report(
                use.call,
                "W905",
                f"os.execute() of '{program} ...' writes to scrun's stdout, which is {where};"
                " use slurm.log_info (or io.popen to read the output)",
            )


def printing_program(ctx: LintContext, command: n.Node) -> str | None:
    """The program a command starts with when it is one that prints and its output is not
    redirected (no `>` in the command's text)."""
    parts = pieces(ctx, command, 0)
    texts = [part.value for part in parts if isinstance(part, Text)]
    if not parts or not isinstance(parts[0], Text) or any(">" in text for text in texts):
        return None
    words = parts[0].value.split()
    program = os.path.basename(words[0]) if words else ""
    return program if program in PRINTING_COMMANDS else None


def check_calls(ctx: LintContext) -> None:
    for call in ctx.calls():
        top_level = call.function is None
        command = ctx.command_call(call)
        if command is not None and top_level:
            ctx.report(
                call,
                "W902",
                f"{command}() at the top level runs on every `scrun create`"
                ", before the job exists; move it into a hook",
            )
        if ctx.library_call(call) == ("os", "exit"):
            effect = (
                "ends `scrun create` itself"
                if top_level
                else "kills the anchor, leaving the container and its job behind"
            )
            ctx.report(
                call,
                "E903",
                f"os.exit(): in Slurm's scrun it {effect} (this scrun"
                " raises an error instead); return slurm.ERROR",
            )
        if ctx.global_call(call) == "print":
            ctx.report(call, "W904", TOP_LEVEL_PRINT if top_level else HOOK_PRINT)
