"""The import graph of the installed packages, read from the source (ast, nothing imported).

Every `import` counts for circles, wherever it is written (in a function, under
`if TYPE_CHECKING:`): a circle of lazy imports is still two modules that cannot be
understood, tested or moved one without the other. The eager imports (what runs when the
module is imported: module and class level, not in a function, not under TYPE_CHECKING)
decide what a process pays for at start, which is what the hot-path rules are about.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TREE = Path(__file__).resolve().parents[3]


# What an import statement names: `import M` is (M, None); `from P import X` is (P, X), where
# X may be the submodule P.X or a name defined in P.
Named = tuple[str, str | None]


@dataclass
class Module:
    name: str
    path: Path  # relative to the tree
    imports: set[Named] = field(default_factory=set)  # every import, wherever written
    eager: set[Named] = field(default_factory=set)  # those run when this module is imported


def package_roots(tree: Path) -> list[str]:
    """The folders that hold the import packages: pyproject.toml's packages.find `where`,
    and this tool's own (not installed)."""
    with open(tree / "pyproject.toml", "rb") as stream:
        project = tomllib.load(stream)
    return [*project["tool"]["setuptools"]["packages"]["find"]["where"], "tools/lint-tree"]


def modules(tree: Path = TREE) -> dict[str, Module]:
    """Every module of the packages under `tree`, with what it imports."""
    found: dict[str, Module] = {}
    for root in package_roots(tree):
        if not (tree / root).is_dir():
            continue
        for path in sorted((tree / root).rglob("*.py")):
            if "build" in path.relative_to(tree / root).parts:
                continue
            parts = path.relative_to(tree / root).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            module = found[name] = Module(name, path.relative_to(tree))
            package = name if is_package else name.rpartition(".")[0]
            syntax = ast.parse(path.read_text(), str(path))
            for node, eager in _statements(syntax.body, eager=True):
                for named in _named(node, package):
                    module.imports.add(named)
                    if eager:
                        module.eager.add(named)
    return found


def _named(node: ast.stmt, package: str) -> Iterator[Named]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            anchor = parts[: len(parts) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            yield base, alias.name


def _statements(body: list[ast.stmt], eager: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement in `body`, nested ones too, with whether it runs at import."""
    for node in body:
        yield node, eager
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _statements(node.body, eager=False)
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            yield from _statements(node.body, eager=False)
            yield from _statements(node.orelse, eager)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _statements([child], eager)
                elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    yield from _statements(child.body, eager)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def resolve(named: Named, found: dict[str, Module] | set[str]) -> str:
    """The module an import names: P.X when that is a module of the tree, else P (or M)."""
    base, name = named
    return f"{base}.{name}" if name is not None and f"{base}.{name}" in found else base


def edges(found: dict[str, Module], eager_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports by name."""
    graph: dict[str, set[str]] = {}
    for name, module in found.items():
        named = module.eager if eager_only else module.imports
        targets = {resolve(one, found) for one in named}
        graph[name] = {target for target in targets if target in found} - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
