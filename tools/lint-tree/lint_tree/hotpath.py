"""The hot path's import rules, declared once: read by `make lint` (statically, from the
source) and by tests/unit/test_lean_imports.py (at run time, the backstop).

podman and docker wait for `scrun state`, `create` (until the anchor it forks says
`created`), `start`, `kill` and `delete`, many times per container; a bare interpreter
starts in ~10 ms, and every standard module imported on top costs about as much again as
it looks cheap: measured with `python3.11 -X importtime` on the test machine, typing ~5 ms
(and 0.7 MB in the anchor), dataclasses ~5 ms, json or re 4.5-9 ms, subprocess ~9 ms,
enum ~4 ms, shutil ~7 ms, tempfile ~5 ms, collections.abc ~2 ms, contextlib ~1 ms; the
chosen libraries plumbum and loguru each cost more than a whole `scrun state` (their
figures: the README's "Libraries"; which is why scrunlib.log is its own engine). So the
modules on those paths import, when they are imported, only scrun's own modules, what the
interpreter already holds at start, and the few listed below; what they need only for
typing sits under `if TYPE_CHECKING:` (TYPE_CHECKING being a plain False: `typing` itself
is not imported), what a rarer branch needs is imported in that branch (`import
subprocess` in the function that runs one), and a `try/except` stands where
`contextlib.suppress` would pull contextlib in (`# noqa: SIM105`).

Imports inside functions are not followed by the static check: the run-time test, which
runs the commands in a fresh interpreter, sees those too.
"""

from __future__ import annotations

from dataclasses import dataclass

# Free wherever: `from __future__ import annotations` is a compiler directive.
ALWAYS_ALLOWED = frozenset({"__future__"})
# scrun's own packages: their modules are under the same rules, followed one by one.
OWN_PREFIX = "scrun"


@dataclass(frozen=True)
class HotPath:
    commands: str  # what podman or docker waits for
    entries: tuple[str, ...]  # the modules those commands import first
    allowed: frozenset[str]  # the standard modules allowed beyond the interpreter's start


HOT_PATHS = (
    HotPath("scrun state", ("scrun_cli.main", "scrun_cli.state"), frozenset()),
    # the C halves of socket (the public module imports enum and selectors), grp and pwd
    HotPath(
        "scrun create, and the anchor it forks until `created`",
        ("scrun_cli.main", "scrun_cli.create", "scrun_anchor.main"),
        frozenset({"_socket", "grp", "pwd"}),
    ),
    HotPath(
        "scrun start, kill, delete",
        ("scrun_cli.main", "scrun_cli.start", "scrun_cli.kill", "scrun_cli.delete"),
        frozenset({"_socket"}),
    ),
)


def allowed(path: HotPath, module: str, at_start: set[str]) -> bool:
    """Whether `path`'s modules may import `module` when they are imported."""
    return (
        module.startswith(OWN_PREFIX)
        or module in ALWAYS_ALLOWED
        or module in path.allowed
        or module in at_start
    )
