"""What a shell command string is built from, and which of its parts the shell may misread.

A command expression (`"rsync -a " .. src .. "/ " .. dst`, `string.format("rm -rf %s", d)`,
a local holding either) is flattened into literal text and spliced values; the text is
scanned for the shell's quoting state (outside quotes, inside '...', inside "...") at each
value. A value is a problem unless it is *safe* or sits inside single quotes:

* safe: literals, numbers (`%d`, `math.floor(x)`, arithmetic), the container id and the
  numeric ids scrun passes to the hooks (scrun only accepts ids made of `[A-Za-z0-9_.+-]`,
  starting with a letter or digit), calls of a function named like `quote`/`escape`, calls
  of the script's own command builders (each value they return is a safe command but for
  the parameters it splices unquoted, which get safe arguments), and locals,
  concatenations and `string.format`s built only from safe parts;
* inside double quotes `$(...)`, backticks, `$VAR` and `\\` still work: a problem;
* `%q` is Lua's quoting (a `"..."` Lua literal), not the shell's: a problem anywhere.

A parameter of the function the command is built in, spliced outside quotes, is neither:
that function is a wrapper (`run(cmd)`), and its callers' arguments are checked instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext
from scrun_lua_check.scope import Variable, VarKind

QUOTING_FUNCTION = re.compile("quote|escape", re.IGNORECASE)
FORMAT_SPEC = re.compile(r"%[-+ #0]*[0-9]*(?:\.[0-9]*)?([a-zA-Z%])")
MAX_DEPTH = 4  # how many `local x = ...` hops to follow
# Hook arguments a shell cannot misread: the container id and numbers.
SAFE_HOOK_ARGUMENTS = frozenset({"id", "job_id", "user_id", "group_id"})

UNQUOTED, DOUBLE_QUOTED, LUA_QUOTED = "unquoted", "double-quoted", "%q"


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class Value:
    node: n.Node
    spec: str = "s"  # the string.format conversion it went through; "s" for `..`


@dataclass
class CommandText:
    """The problems found in one command expression, and the parameters it forwards."""

    problems: list[tuple[n.Node, str]] = field(default_factory=list)  # (value, UNQUOTED|...)
    forwarded: set[Variable] = field(default_factory=set)


def analyse(ctx: LintContext, expr: n.Node) -> CommandText:
    """Problems of the command string `expr`, built in the function that contains it."""
    result = CommandText()
    for alternative in alternatives(ctx, expr, 0):
        scan(ctx, pieces(ctx, alternative, 0), expr.function, result)
    return result


def alternatives(ctx: LintContext, expr: n.Node, depth: int) -> list[n.Node]:
    """The expressions the command may be: both sides of `a or b`, each value of a local."""
    expr = n.unparen(expr)
    if isinstance(expr, n.BinOp) and expr.op in ("and", "or"):
        return alternatives(ctx, expr.left, depth) + alternatives(ctx, expr.right, depth)
    variable = local_value_holder(ctx, expr)
    if variable is not None and len(variable.values) > 1 and depth < MAX_DEPTH:
        return [alt for value in variable.values for alt in alternatives(ctx, value, depth + 1)]
    return [expr]


def pieces(ctx: LintContext, expr: n.Node, depth: int) -> list[Text | Value]:
    """`expr` as literal text and spliced values, in order."""
    expr = n.unparen(expr)
    if isinstance(expr, n.String):
        return [Text(expr.value)]
    if isinstance(expr, n.BinOp) and expr.op == "..":
        return pieces(ctx, expr.left, depth) + pieces(ctx, expr.right, depth)
    formatted = format_call(ctx, expr)
    if formatted is not None:
        return format_pieces(ctx, *formatted, depth)
    variable = local_value_holder(ctx, expr)
    if variable is not None and len(variable.values) == 1 and depth < MAX_DEPTH:
        return pieces(ctx, variable.values[0], depth + 1)
    return [Value(expr)]


def local_value_holder(ctx: LintContext, expr: n.Node) -> Variable | None:
    """The local variable `expr` names when every value it can hold is one the script
    assigned (not a parameter, whose first value comes from the caller)."""
    variable = ctx.scopes.variable(expr)
    return variable if variable is not None and variable.kind is VarKind.LOCAL else None


def format_pieces(
    ctx: LintContext, template: n.Node, args: list[n.Node], depth: int
) -> list[Text | Value]:
    text = n.static_string(template)
    if text is None:  # format string not known: every argument may be spliced anywhere
        return [Value(template), *(Value(arg) for arg in args)]
    found: list[Text | Value] = []
    remaining = iter(args)
    position = 0
    for match in FORMAT_SPEC.finditer(text):
        found.append(Text(text[position : match.start()]))
        position = match.end()
        conversion = match.group(1)
        if conversion == "%":
            found.append(Text("%"))
            continue
        arg = next(remaining, None)
        if arg is None:
            break
        if conversion == "s":
            found.extend(pieces(ctx, arg, depth))
        elif conversion == "q":
            found.append(Value(arg, "q"))
        else:
            found.append(Text("0"))  # a number
    found.append(Text(text[position:]))
    return found


def scan(
    ctx: LintContext, parts: list[Text | Value], function: n.Function | None, result: CommandText
) -> None:
    quote = ""  # the shell's state: "", "'" or '"'
    for part in parts:
        if isinstance(part, Text):
            quote = after_text(quote, part.value)
            continue
        if is_safe(ctx, part.node, 0):
            continue
        if part.spec == "q":
            result.problems.append((part.node, LUA_QUOTED))
        elif quote == '"':
            result.problems.append((part.node, DOUBLE_QUOTED))
        elif quote == "":
            parameter = forwarded_parameter(ctx, part.node, function)
            if parameter is not None:
                result.forwarded.add(parameter)
            else:
                result.problems.append((part.node, UNQUOTED))


def after_text(quote: str, text: str) -> str:
    """The shell's quoting state after `text` (backslash escapes outside single quotes)."""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote == "" and char in "'\"":
            quote = char
        elif char == quote:
            quote = ""
    return quote


def forwarded_parameter(
    ctx: LintContext, node: n.Node, function: n.Function | None
) -> Variable | None:
    """The parameter `node` names, when it is one of `function`'s own (not a hook's) and never
    reassigned: the caller decides what it holds."""
    variable = ctx.scopes.variable(node)
    if (
        function is None
        or variable is None
        or variable.kind is not VarKind.ARG
        or variable.scope.function is not function
        or variable.writes
        or function in ctx.hook_functions
    ):
        return None
    return variable


def is_safe(
    ctx: LintContext, expr: n.Node, depth: int, seen: frozenset[Variable] = frozenset()
) -> bool:
    """Whether the value of `expr` surely cannot change a shell command it is spliced into.
    `seen`: the locals whose values are being examined (`s = s .. part` is safe when its
    other values and `part` are)."""
    expr = n.unparen(expr)
    if isinstance(expr, (n.String, n.Number)) or ctx.value_kind(expr) == "number":
        return True
    if isinstance(expr, n.Call) and QUOTING_FUNCTION.search(n.describe(expr.func)):
        return True
    if isinstance(expr, n.MethodCall) and QUOTING_FUNCTION.search(expr.method):
        return True
    if depth >= MAX_DEPTH:
        return False
    if isinstance(expr, n.Call) and ctx.global_call(expr) == "tostring" and expr.args:
        return is_safe(ctx, expr.args[0], depth + 1, seen)
    if isinstance(expr, n.Call):
        function = ctx.called_function(expr)
        if function is not None:
            forwarded = safe_command_builder(ctx, function)
            return forwarded is not None and all(
                is_safe(ctx, arg, depth + 1, seen) or safe_command(ctx, arg)
                for i, arg in enumerate(expr.args)
                if i in forwarded
            )
    # (an operator is no hop: a long `a .. b .. c ..` chain is followed to its end)
    if isinstance(expr, n.BinOp) and expr.op == "and":
        # `c and x` is `c` only when `c` is nil or false, which `..` cannot splice
        return is_safe(ctx, expr.right, depth, seen)
    if isinstance(expr, n.BinOp) and expr.op in ("..", "or"):
        return is_safe(ctx, expr.left, depth, seen) and is_safe(ctx, expr.right, depth, seen)
    formatted = format_call(ctx, expr)
    if formatted is not None:
        template, args = formatted
        return n.static_string(template) is not None and all(
            is_safe(ctx, arg, depth + 1, seen) for arg in args
        )
    variable = ctx.scopes.variable(expr)
    if variable is None:
        return False
    if variable in seen:
        return True
    if not (safe_hook_argument(ctx, variable) or variable.values):
        return False
    return all(is_safe(ctx, value, depth + 1, seen | {variable}) for value in variable.values)


def safe_command(ctx: LintContext, expr: n.Node) -> bool:
    """Whether `expr` is a command with nothing unsafe in it (quoting followed through)."""
    found = analyse(ctx, expr)
    return not found.problems and not found.forwarded


# The script's functions whose returns safe_command_builder is examining (a builder that
# calls itself is not taken as safe).
_examining: set[n.Function] = set()


def safe_command_builder(ctx: LintContext, function: n.Function) -> set[int] | None:
    """When `function` is a command builder whose result may be spliced anywhere outside
    quotes: the positions of the parameters it splices unquoted (its result is safe when
    the arguments there are: `"sh -c " .. quote(c)` needs nothing, `"nice " .. c` a safe
    `c`); else None. A builder returns something, and each value it returns is a command in
    which nothing but those parameters is unsafe (`"rm -rf -- " .. quote(dir)`)."""
    if function in _examining:
        return None
    _examining.add(function)
    try:
        returned = [
            node.values[0]
            for node in n.walk(function.body)
            if isinstance(node, n.Return) and node.function is function and node.values
        ]
        forwarded: set[n.Node] = set()
        for value in returned:
            found = analyse(ctx, value)
            if found.problems:
                return None
            forwarded |= {variable.decl for variable in found.forwarded}
        if not returned:
            return None
        return {i for i, param in enumerate(function.params) if param in forwarded}
    finally:
        _examining.discard(function)


def safe_hook_argument(ctx: LintContext, variable: Variable) -> bool:
    """Whether `variable` is a hook parameter receiving the container id or a numeric id."""
    function = variable.scope.function
    hook = ctx.hook_functions.get(function) if function is not None else None
    if variable.kind is not VarKind.ARG or hook is None or function is None:
        return False
    position = next(i for i, param in enumerate(function.params) if param is variable.decl)
    params = next(h.params for h in api.ALL_HOOKS if h.name == hook)
    return position < len(params) and params[position] in SAFE_HOOK_ARGUMENTS


def format_call(ctx: LintContext, expr: n.Node) -> tuple[n.Node, list[n.Node]] | None:
    """(format string, arguments) of `string.format(f, ...)` or `f:format(...)`."""
    if ctx.library_call(expr) == ("string", "format") and isinstance(expr, n.Call) and expr.args:
        return expr.args[0], expr.args[1:]
    if isinstance(expr, n.MethodCall) and expr.method == "format":
        return expr.obj, expr.args
    return None
