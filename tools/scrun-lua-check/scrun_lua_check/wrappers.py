"""Calls that run a shell command: directly, or through the script's own wrapper function.

Scripts often wrap the command functions (`local function run(cmd) local s, out =
slurm.allocator_command(cmd) ... return s end`). A function is a wrapper when a parameter of
its own ends up, outside quotes, in the command it runs (directly or through another
wrapper); its callers' arguments for that parameter are then command text, checked like the
argument of a direct call. It passes the exit status on when it returns the STATUS of a
slurm command (or of another such wrapper), so ignoring its result is ignoring the status.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scrun_lua_check import nodes as n
from scrun_lua_check.commandtext import analyse
from scrun_lua_check.context import LintContext

MAX_ROUNDS = 5  # wrappers of wrappers of ...: how deep to look


@dataclass
class Wrapper:
    function: n.Function
    runs: str  # the command function it ends in: `slurm.allocator_command`, `os.execute`
    params: set[int] = field(default_factory=set)  # positions whose argument is command text
    status: bool = False


@dataclass(frozen=True)
class CommandUse:
    """A call that runs a shell command, with the arguments that become its text."""

    call: n.Call
    name: str  # for messages: `slurm.allocator_command()`, `run() (a wrapper of ...)`
    runs: str  # the command function: `slurm.allocator_command`, `os.execute`, ...
    commands: tuple[n.Node, ...]
    status: bool  # its first result is the command's exit status (the slurm commands)


def command_uses(ctx: LintContext) -> list[CommandUse]:
    """Every call in the script that runs a shell command."""
    wrappers: dict[n.Function, Wrapper] = {}
    for _ in range(MAX_ROUNDS):
        uses = [use for call in ctx.calls() if (use := command_use(ctx, call, wrappers))]
        if not learn(ctx, uses, wrappers):
            return uses
    return [use for call in ctx.calls() if (use := command_use(ctx, call, wrappers))]


def command_use(
    ctx: LintContext, call: n.Node, wrappers: dict[n.Function, Wrapper]
) -> CommandUse | None:
    if not isinstance(call, n.Call) or not call.args:
        return None
    name = ctx.command_call(call)
    if name is not None:
        # The slurm commands use their last argument; os.execute and io.popen their first.
        slurm = name.startswith("slurm.")
        command = call.args[-1] if slurm else call.args[0]
        return CommandUse(call, f"{name}()", name, (command,), slurm)
    function = ctx.called_function(call)
    wrapper = wrappers.get(function) if function is not None else None
    if wrapper is None:
        return None
    commands = tuple(call.args[i] for i in sorted(wrapper.params) if i < len(call.args))
    if not commands:
        return None
    described = f"{n.describe(call.func)}() (a wrapper of {wrapper.runs}())"
    return CommandUse(call, described, wrapper.runs, commands, wrapper.status)


def learn(ctx: LintContext, uses: list[CommandUse], wrappers: dict[n.Function, Wrapper]) -> bool:
    """Add what `uses` show about wrappers; whether anything new was learnt."""
    changed = False
    for use in uses:
        function = use.call.function
        if function is None:
            continue
        forwarded = {
            variable.decl
            for command in use.commands
            for variable in analyse(ctx, command).forwarded
        }
        positions = {i for i, param in enumerate(function.params) if param in forwarded}
        if not positions:
            continue
        wrapper = wrappers.setdefault(function, Wrapper(function, use.runs))
        if not positions <= wrapper.params:
            wrapper.params |= positions
            changed = True
    for wrapper in wrappers.values():
        if not wrapper.status and returns_status(ctx, wrapper.function, uses):
            wrapper.status = changed = True
    return changed


def returns_status(ctx: LintContext, function: n.Function, uses: list[CommandUse]) -> bool:
    """Whether `function` returns the STATUS of a command: the call itself, or a local that
    received it."""
    status_calls = {use.call for use in uses if use.status}
    for node in n.walk(function.body):
        if not isinstance(node, n.Return) or node.function is not function or not node.values:
            continue
        value = n.unparen(node.values[0])
        if value in status_calls:
            return True
        variable = ctx.scopes.variable(value)
        if variable is None:
            continue
        for call in status_calls:
            how, target = status_destination(call)
            if how == "stored" and target is not None and ctx.assigned_variable(target) is variable:
                return True
    return False


def status_destination(call: n.Node) -> tuple[str, n.Node | None]:
    """Where a call's first result goes: ("ignored", None) for a call statement,
    ("discarded", None) when an assignment has no target for it, ("stored", target), or
    ("used", None) inside an expression, returned or passed on."""
    node: n.Node = call
    while isinstance(node.parent, n.Paren):
        node = node.parent
    if isinstance(node.parent, n.CallStat):
        return "ignored", None
    assigned = n.assignment(node.parent)
    if assigned is None:
        return "used", None
    targets, values = assigned
    position = next(i for i, value in enumerate(values) if value is node)
    if position >= len(targets):
        return "discarded", None
    return "stored", targets[position]
