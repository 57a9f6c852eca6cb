"""tools/lint-tree: the import graph read from the source, its circles, the hot-path rule."""

from lint_tree.__main__ import MAX_LINES, circle_problems, hot_path_problems, length_problems
from lint_tree.children import child_problems
from lint_tree.graph import circles, edges, modules
from lint_tree.hotpath import HOT_PATHS


def write_tree(tmp_path, files):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.packages.find]\nwhere = ["shared"]\n'
    )
    for name, text in files.items():
        path = tmp_path / "shared" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(tmp_path)


def test_a_circle_through_lazy_and_type_checking_imports_is_found(tmp_path):
    found = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    from pkg import b\n",
            "pkg/b.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg.c import C\n",
            "pkg/c.py": "from . import a\n",
            "pkg/d.py": "import pkg.a\n",
        },
    )
    assert circles(edges(found)) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]
    # what runs at import: neither the function's import nor the TYPE_CHECKING one
    assert edges(found, eager_only=True)["pkg.a"] == set()
    assert edges(found, eager_only=True)["pkg.b"] == set()
    assert edges(found, eager_only=True)["pkg.c"] == {"pkg.a"}


def test_from_package_import_name_is_the_package_unless_a_submodule(tmp_path):
    found = write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "VALUE = 1\n",
            "pkg/sub.py": "",
            "user.py": "from pkg import VALUE, sub\n",
        },
    )
    assert edges(found)["user"] == {"pkg", "pkg.sub"}


def test_the_tree_has_no_circle_beyond_the_known_ones():
    assert circle_problems(modules()) == []


def test_an_eager_import_on_a_hot_path_is_reported(tmp_path):
    entry = HOT_PATHS[0].entries[-1]
    package, _, leaf = entry.rpartition(".")
    found = write_tree(
        tmp_path,
        {
            f"{package}/__init__.py": "",
            f"{package}/{leaf}.py": "import json\ndef f():\n    import subprocess\n",
            **{f"{p.replace('.', '/')}.py": "" for p in HOT_PATHS[0].entries if p != entry},
        },
    )
    problems = hot_path_problems(found, set(), HOT_PATHS[:1])
    assert problems and all("imports json" in problem for problem in problems)


def test_a_module_over_the_length_limit_is_reported(tmp_path):
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "tools" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert length_problems(tmp_path) == [
        f"tools/long.py: {MAX_LINES + 1} lines (at most 500: split it)"
    ]


def test_starting_or_waiting_for_a_process_outside_the_process_layer_is_reported(tmp_path):
    found = write_tree(
        tmp_path,
        {
            "scrunlib/__init__.py": "",
            "scrunlib/processes.py": "import os\nimport subprocess\npid = os.fork()\n",
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    import subprocess\n",
            "pkg/b.py": "import os\nos.waitpid(1, 0)\ncode = os.waitstatus_to_exitcode(0)\n",
            "pkg/c.py": "from os import posix_spawn, getpid\nimport pty\npty.fork()\n",
            "pkg/d.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import subprocess\n",
            "pkg/e.py": "from asyncio import subprocess\nimport multiprocessing\n",
            "pkg/f.py": "import os\nfd = os.pidfd_open(1)\nos.execv('x', [])\n",
        },
    )
    rule = "only scrunlib.processes starts or waits for processes (lint_tree/children.py)"
    assert child_problems(found, tmp_path) == [
        f"shared/pkg/a.py:2: subprocess: {rule}",
        f"shared/pkg/b.py:2: os.waitpid: {rule}",
        f"shared/pkg/c.py:1: os.posix_spawn: {rule}",
        f"shared/pkg/c.py:3: pty.fork: {rule}",
        f"shared/pkg/e.py:1: asyncio.subprocess: {rule}",
        f"shared/pkg/e.py:2: multiprocessing: {rule}",
        f"shared/pkg/f.py:2: os.pidfd_open: {rule}",
        f"shared/pkg/f.py:3: os.execv: {rule}",
    ]


def test_only_the_process_layer_starts_processes_in_the_tree():
    assert child_problems(modules()) == []
