"""The hot path's import rules, declared once: read by `make lint` (statically, from the
source) and by tests/unit/test_lean_imports.py (at run time, the backstop). The figures
below are stated here only: the modules that keep an import off the path say which, and
refer here for what it would cost.

podman and docker wait for `scrun state`, `create` (until the anchor it forks says
`created`), `start`, `kill` and `delete`, many times per container; a bare interpreter
starts in ~10 ms (`scrun state` in ~11 ms), and every standard module imported on top costs
about as much again as it looks cheap. Measured with `python3.11 -X importtime`
(cumulative) on the test machine, what each would add to a process that imports it:

    typing ~5 ms (and 0.7 MB in the anchor)    dataclasses ~5 ms
    json 5-9 ms (re included)                  re ~4 ms (getopt: gettext and re)
    enum ~3 ms                                 socket ~5 ms (enum, selectors)
    subprocess ~9 ms (locale, re, threading, selectors, signal, enum)
    shutil ~7 ms (fnmatch, re)                 tempfile ~5 ms
    collections.abc ~2 ms                      contextlib ~1 ms
    datetime ~1 ms                             time.strptime ~3 ms
    scrunlib.slurm ~15 ms (subprocess, re, enum: what `delete` needs after a dead anchor)
    the container module of the anchor ~10 ms (subprocess, selectors, signal, socket)
    plumbum, loguru: each more than a whole `scrun state` (the README's "Libraries")
    the anchor's pid namespace (scrunlib.pidns), on every create that may make one: ctypes
      and unshare in create 1.6 ms, the mount namespace and /proc in the anchor 0.7 ms
      (medians of 15, Python 3.11), ctypes 0.6 MB in the anchor
    an interpreter's own teardown ~5 ms        a new interpreter for the anchor ~20 ms
    a site's scrun.lua in the anchor (scrunlib.lua, loaded before any job, kept for the
      container's life): load_stager of docs/scrun-lua/shared-scratch.lua after the
      anchor's modules 11 ms and +1.0 MB private dirty memory, lupa.lua54 about 5 ms and
      0.4 MB of it; with dataclasses, typing, json and re it was 26 ms and +3.5 MB, and
      scrunlib.lua.stage's import there 17 -> 3 ms (medians of 15, Python 3.11). A running
      container's anchor 9.6 -> 7.4 MB private dirty, and create's `parse` phase (state.json)
      38 -> 20 ms, on the Debian 12 cluster (medians of 5 and of 2 x 11)

So the modules on those paths import, when they are imported, only scrun's own modules,
what the interpreter already holds at start, and the few listed below; what they need only
for typing sits under `if TYPE_CHECKING:` (TYPE_CHECKING being a plain False: `typing`
itself is not imported), what a rarer branch needs is imported in that branch (`import
subprocess` in the function that runs one), and a `try/except` stands where
`contextlib.suppress` would pull contextlib in (`# noqa: SIM105`). Classes are plain ones
(no dataclasses), constants plain strings (no enum), JSON goes through scrunlib.leanjson,
signals through scrunlib.signals, logging through scrunlib.log (not loguru), `scrun`
leaves with os._exit (no teardown), and `create` forks the anchor (no new interpreter).
ctypes, which no Python can do without for mount(2), is imported in the function that
makes the anchor's namespace. lupa, which a site's scrun.lua cannot run without, counts
with what it imports itself (HotPath.libraries), and is imported as `import lupa.lua54`
(`from lupa import lua54` goes through lupa's __getattr__, which imports re).

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
    # Third-party modules the path cannot do without: each, its packages, and whatever it
    # imports itself (which is not ours to trim; the run-time test leaves that out).
    libraries: tuple[str, ...] = ()


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
    # A site's scrun.lua, which the anchor loads before any job (scrun_anchor.staging's
    # load_stager: scrunlib.lua.stage, then the runtime and the error table in functions),
    # in every container's anchor for its whole life. Beyond the anchor's own: lupa, the Lua
    # it runs (with its own imports: contextlib, collections, functools, zlib), and math,
    # which is built into the interpreter (no file to read).
    HotPath(
        "the anchor with a site's scrun.lua, until `created`",
        (
            "scrun_cli.main",
            "scrun_cli.create",
            "scrun_anchor.main",
            "scrunlib.lua.stage",
            "scrunlib.lua.runtime",
            "scrunlib.lua.errcodes",
        ),
        frozenset({"_socket", "grp", "pwd", "math"}),
        libraries=("lupa.lua54",),
    ),
)


def allowed(path: HotPath, module: str, at_start: set[str]) -> bool:
    """Whether `path`'s modules may import `module` when they are imported."""
    return (
        module.startswith(OWN_PREFIX)
        or module in ALWAYS_ALLOWED
        or module in path.allowed
        or module in at_start
        or any(f"{library}.".startswith(f"{module}.") for library in path.libraries)
    )
