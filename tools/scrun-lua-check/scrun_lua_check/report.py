"""Diagnostics and how they are printed: `file:line:col: CODE message` or JSON for CI."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from scrun_lua_check.codes import is_error

EXIT_CLEAN, EXIT_WARNINGS, EXIT_ERRORS = 0, 1, 2


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str
    line: int
    col: int
    code: str
    message: str

    @property
    def severity(self) -> str:
        return "error" if is_error(self.code) else "warning"

    def text(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "severity": self.severity}


def exit_code(diagnostics: Iterable[Diagnostic], strict: bool) -> int:
    """0 clean, 1 warnings only, 2 errors (with `strict`, warnings count as errors)."""
    result = EXIT_CLEAN
    for diagnostic in diagnostics:
        if diagnostic.severity == "error" or strict:
            return EXIT_ERRORS
        result = EXIT_WARNINGS
    return result


def counts(diagnostics: list[Diagnostic]) -> tuple[int, int]:
    """(errors, warnings)."""
    errors = sum(1 for diagnostic in diagnostics if diagnostic.severity == "error")
    return errors, len(diagnostics) - errors


def summary(diagnostics: list[Diagnostic]) -> str:
    errors, warnings = counts(diagnostics)
    return f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"


def render_text(diagnostics: list[Diagnostic]) -> str:
    lines = [diagnostic.text() for diagnostic in diagnostics]
    if diagnostics:
        lines.append(summary(diagnostics))
    return "\n".join(lines)


def render_json(diagnostics: list[Diagnostic], extra: dict[str, object] | None = None) -> str:
    errors, warnings = counts(diagnostics)
    document: dict[str, object] = {
        "diagnostics": [diagnostic.as_dict() for diagnostic in diagnostics],
        "errors": errors,
        "warnings": warnings,
    }
    document.update(extra or {})
    return json.dumps(document, indent=2)
