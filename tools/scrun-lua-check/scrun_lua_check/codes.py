"""Every diagnostic code with its one-line title.

Codes never change meaning once released: CI configurations and inline suppressions name
them. The letter is the severity (E error, W warning); the number groups the check. The
1xx-4xx numbers mirror luacheck's, so people who know luacheck recognise them.
"""

from __future__ import annotations

CODES: dict[str, str] = {
    "E001": "syntax error",
    "E002": "Lua accepts the script but the checker cannot parse it (checker limitation)",
    "W111": "setting a non-standard global variable",
    "W113": "accessing an undefined global variable",
    "W121": "setting a read-only global variable (standard library or slurm)",
    "W143": "accessing an undefined field of a standard library table",
    "W211": "unused local variable or function",
    "W212": "unused argument (hook parameters excepted)",
    "W213": "unused loop variable",
    "W231": "local variable is set but never accessed",
    "W311": "value assigned to a local variable is unused",
    "W411": "redefining a local variable in the same scope",
    "W421": "shadowing a local variable of an enclosing scope",
    "W431": "shadowing an upvalue (a local of an enclosing function)",
    "E501": "required hook is not defined",
    "E502": "hook is not defined as a global function",
    "W503": "hook has the wrong number of parameters",
    "W504": "hook parameter is in the wrong position",
    "W601": "hook may end without returning a number",
    "W602": "hook returns something that is not a number",
    "E603": "script chunk returns a non-zero number (scrun refuses to load it)",
    "W604": "script chunk does not return slurm.SUCCESS",
    "E701": "call of something that is not a slurm function",
    "E702": "unknown slurm field or constant",
    "E703": "too few arguments to a slurm function",
    "W704": "too many arguments to a slurm function (the extra ones are ignored)",
    "W705": "slurm.log arguments in the man page's (wrong) order",
    "W706": "slurm.log_user (raises an error in Slurm's own scrun)",
    "W801": "result of a command is ignored",
    "W802": "exit status of a command is never read",
    "W803": "value spliced unquoted into a shell command",
    "W804": "set_root_path without a root.path update in the written config (heuristic)",
    "W805": "result of a helper that returns nil or false when it fails is ignored",
    "W806": "field indexed without the nil check the script makes elsewhere",
    "W807": "a GPU field of the step read from job_env (set only on the node, at launch)",
    "E901": "required module cannot be loaded",
    "W902": "command run at the top level of the script",
    "E903": "os.exit called",
    "W904": "print used (its output goes to the caller or into the container)",
    "W905": "os.execute of a printing command (its output goes to the caller or the container)",
}


def is_error(code: str) -> bool:
    return code.startswith("E")


def matches(code: str, patterns: frozenset[str]) -> bool:
    """Whether `code` is selected by one of `patterns` (a full code or a prefix like `W2`)."""
    return any(code.startswith(pattern) for pattern in patterns)
