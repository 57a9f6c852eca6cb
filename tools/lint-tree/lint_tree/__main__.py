"""`python -m lint_tree`: the tree's own checks (make lint). Exit 1 with one line per
problem."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from scrunlib import processes

from lint_tree.children import child_problems
from lint_tree.graph import TREE, Module, circles, edges, modules, resolve
from lint_tree.hotpath import HOT_PATHS, HotPath, allowed

MAX_LINES = 500  # a module longer than this holds more than one thing: split it
# Where module length is checked: the source (the tests are files of cases).
SIZED = ("shared", "tools", "bench")


def circle_problems(found: dict[str, Module]) -> list[str]:
    """Every import circle is one: no two modules may need each other."""
    return [f"import circle: {' <-> '.join(sorted(circle))}" for circle in circles(edges(found))]


def interpreter_start() -> set[str]:
    """The modules this Python holds before running any code of its own."""
    listing = "import sys; sys.stdout.write(' '.join(sys.modules))"
    code, out, err = processes.run([sys.executable, "-c", listing], dict(os.environ), 60)
    if code != 0:
        raise SystemExit(f"lint_tree: {sys.executable} failed: {err.strip()}")
    return set(out.split())


def hot_path_problems(
    found: dict[str, Module], at_start: set[str], paths: Sequence[HotPath] = HOT_PATHS
) -> list[str]:
    problems: list[str] = []
    for path in paths:
        pending = list(path.entries)
        seen: set[str] = set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            if name not in found:
                problems.append(f"lint_tree/hotpath.py: {name} is no module of the tree")
                continue
            seen.add(name)
            # importing a.b.c runs a/__init__ and a/b/__init__ first
            parts = name.split(".")
            pending += [".".join(parts[:i]) for i in range(1, len(parts))]
            for named in sorted(found[name].eager, key=str):
                target = resolve(named, found)
                if target in found:
                    pending.append(target)
                elif not allowed(path, target, at_start):
                    problems.append(
                        f"{found[name].path}: imports {target} when imported,"
                        f" on the path of {path.commands} (lint_tree/hotpath.py)"
                    )
    return problems


def length_problems(tree: Path = TREE) -> list[str]:
    return [
        f"{path.relative_to(tree)}: {lines} lines (at most {MAX_LINES}: split it)"
        for folder in SIZED
        for path in sorted((tree / folder).rglob("*.py"))
        if "build" not in path.relative_to(tree).parts
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]


def main() -> int:
    found = modules()
    problems = [
        *circle_problems(found),
        *hot_path_problems(found, interpreter_start()),
        *length_problems(),
        *child_problems(found),
    ]
    for problem in dict.fromkeys(problems):
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
