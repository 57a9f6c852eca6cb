"""docs/engine-commands.md against the code and the tests: every runtime command scrun
implements or refuses has a row, every refusal quoted is scrun's own text, every test the
table names exists. The table cannot drift from what scrun does."""

from __future__ import annotations

import re
from pathlib import Path

from scrun_cli.main import COMMANDS, NOT_SUPPORTED

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "engine-commands.md"
# scrun commands no engine calls: `run` and `list` are for people
ONLY_BY_HAND = {"run", "list"}


def rows() -> list[list[str]]:
    table = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]
    assert cells[0] == ["engine command", "runtime call", "what scrun does",
                        "what the user sees", "tests"]  # fmt: skip
    assert all(len(row) == 5 for row in cells), [row for row in cells if len(row) != 5]
    return cells[1:]


def test_every_runtime_command_has_a_row():
    calls = " ".join(row[1] for row in rows())
    named = set(re.findall(r"`(?:scrun )?([a-z-]+)", calls))
    wanted = (set(COMMANDS) - ONLY_BY_HAND - {"version"}) | {"--version", "checkpoint"}
    assert wanted <= named | {word.lstrip("-") for word in named}, wanted - named


def test_refusals_quoted_are_scruns_own():
    text = DOC.read_text()
    for command in ("checkpoint",):
        assert f"scrun does not support '{command}': {NOT_SUPPORTED[command]}" in text


def test_every_named_test_exists():
    named = re.findall(r"`((?:tests/unit/)?test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)`",
                       DOC.read_text())  # fmt: skip
    assert len(named) >= 20
    for path, function in named:
        file = REPO / path if path.startswith("tests/") else REPO / "tests/integration" / path
        assert re.search(rf"^def {function}\(", file.read_text(), re.MULTILINE), (path, function)


def test_every_row_is_backed_by_a_test():
    for row in rows():
        assert "::test_" in row[4], row[0]
