"""Calls whose effect depends on where they run: the chunk's top level or a hook.

The chunk runs on every `scrun create`, before any job exists, and its stdout is the one the
container engine (podman, docker) reads from its runtime; the hooks run in the anchor, whose
stdout is the container's. So: no commands and no print at the top level, and never os.exit.
"""

from __future__ import annotations

from scrun_lua_check.context import Context

TOP_LEVEL_PRINT = (
    "print() at the top level writes to the output of `scrun create`, which the"
    " container engine reads; use slurm.log_info"
)
HOOK_PRINT = (
    "print() output ends up in the container's output when it runs in a hook; use slurm.log_info"
)


def check_placement(ctx: Context) -> None:
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
