"""The child-process rule, declared once: only scrunlib.processes starts or waits for a
process.

That module holds the one policy every child runs under (its complete environment, a time
limit, its process group killed past it, one wording for its failures) and the one idiom
to wait for it, signal it and end it (processes.Child). A module that starts or waits for a
process by itself escapes both. So no other module of the tree:
- imports `subprocess`, `multiprocessing` or `asyncio.subprocess` (a type needed only for
  the checker may be imported under `if TYPE_CHECKING:`),
- calls or imports the os module's process calls (fork, the exec, spawn and wait family,
  system, popen, pidfd_open: a pidfd is how a process is waited for), or `pty`'s fork
  and spawn.

The tests (tests/) are not modules of the tree: they drive scrun from outside, as podman
does.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lint_tree.graph import TREE, Module, is_type_checking

# The one module allowed to (by its import name).
PROCESS_LAYER = "scrunlib.processes"

# Modules whose only purpose is to start processes.
STARTING_MODULES = frozenset({"subprocess", "multiprocessing", "asyncio.subprocess"})
# os's calls that start or wait for a process; os.waitstatus_to_exitcode only decodes.
_OS_CALLS = re.compile(
    r"^(fork|forkpty|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?|wait|waitid|waitpid|wait3|"
    r"wait4|system|popen|pidfd_open)$"
)
_PTY_CALLS = frozenset({"fork", "spawn"})


@dataclass(frozen=True)
class Use:
    line: int
    what: str  # `subprocess`, `os.fork`, ...


def _process_call(module: str, name: str) -> bool:
    return (module == "os" and bool(_OS_CALLS.match(name))) or (
        module == "pty" and name in _PTY_CALLS
    )


def uses(source: str) -> Iterator[Use]:
    """Where `source` starts or waits for a process, by the rule above."""
    yield from _walk(ast.parse(source).body)


def _walk(body: list[ast.stmt]) -> Iterator[Use]:
    for statement in body:
        if isinstance(statement, ast.If) and is_type_checking(statement.test):
            yield from _walk(statement.orelse)  # the checker's imports run nothing
            continue
        for node in ast.walk(statement):
            yield from _node_uses(node)


def _node_uses(node: ast.AST) -> Iterator[Use]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in STARTING_MODULES:
                yield Use(node.lineno, alias.name)
    elif isinstance(node, ast.ImportFrom) and not node.level:
        module = node.module or ""
        for alias in node.names:
            named = f"{module}.{alias.name}"
            if {module, named} & STARTING_MODULES or _process_call(module, alias.name):
                yield Use(node.lineno, named)
    elif (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and _process_call(node.value.id, node.attr)
    ):
        yield Use(node.lineno, f"{node.value.id}.{node.attr}")


def child_problems(found: dict[str, Module], tree: Path = TREE) -> list[str]:
    """One line for each place outside PROCESS_LAYER that starts or waits for a process."""
    return [
        f"{module.path}:{use.line}: {use.what}: only {PROCESS_LAYER} starts or waits for"
        " processes (lint_tree/children.py)"
        for name, module in sorted(found.items())
        if name != PROCESS_LAYER
        for use in uses((tree / module.path).read_text())
    ]
