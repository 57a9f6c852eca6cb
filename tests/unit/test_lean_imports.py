"""The run-time backstop of the hot path's import rules (tools/lint-tree/lint_tree/hotpath.py,
where they and their reasons are declared; `make lint` checks them statically): each check
runs the path in a fresh interpreter on the source tree, so imports inside functions count
too."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lint_tree.hotpath import HOT_PATHS, HotPath, allowed

TREE = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(
    str(TREE / part) for part in ("shared", "tools/scrun", "tools/scrun-anchor")
)


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after `code`, beyond those of its bare start."""

    def run(source: str) -> set[str]:
        listing = "import sys; sys.stderr.write(' '.join(sys.modules))"
        result = subprocess.run(
            [sys.executable, "-c", f"{source}\n{listing}"],
            env={**os.environ, "PYTHONPATH": PYTHONPATH},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return set(result.stderr.split())

    return run(code) - run("pass")


def disallowed(path: HotPath, modules: set[str]) -> set[str]:
    return {name for name in modules if not allowed(path, name, set())}


def test_scrun_state_as_run_imports_only_what_its_rules_allow(tmp_path):
    root = tmp_path / "root"
    (root / "c1").mkdir(parents=True)
    root.chmod(0o700)
    (root / "c1").chmod(0o700)
    state = {"id": "c1", "bundle": "/b", "rootfs": "/b/rootfs", "status": "stopped"}
    (root / "c1" / "state.json").write_text(json.dumps(state))
    argv = ["--root", str(root), "state", "c1"]
    extra = modules_after(f"from scrun_cli.main import main; assert main({argv!r}) == 0")
    (path,) = (path for path in HOT_PATHS if "scrun_cli.state" in path.entries)
    assert disallowed(path, extra) == set()


@pytest.mark.parametrize("path", HOT_PATHS, ids=lambda path: path.commands)
def test_each_hot_path_imports_only_what_its_rules_allow(path):
    """`scrun create` waits for the anchor's `created`: what serving the container needs
    (scrun_anchor.container: subprocess, signal, selectors, socket) is loaded while salloc
    runs, so none of it may be imported before."""
    extra = modules_after("import " + ", ".join(path.entries))
    assert disallowed(path, extra - of_libraries(path)) == set()


def of_libraries(path: HotPath) -> set[str]:
    """What the path's third-party libraries import themselves (theirs, not ours to trim)."""
    return modules_after("import " + ", ".join(path.libraries)) if path.libraries else set()


# scrun.lua's hooks, reading and writing JSON as the shipped scripts (docs/scrun-lua) do.
SCRUN_LUA = """
local json = require("cjson")
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local config = slurm.from_json('{"process": {"env": ["A=1"]}, "root": {"path": "rootfs"}}')
  config.root.path = "/staged/rootfs"
  slurm.log_debug(json.encode(config) .. slurm.to_json(config))
  return slurm.SUCCESS
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
return slurm.SUCCESS
"""


def test_the_anchor_with_a_scrun_lua_imports_only_what_its_rules_allow(tmp_path):
    """As the anchor does for a site's scrun.lua (scrun_anchor.staging.load_stager, whose
    imports inside functions the static check does not follow), then a stage-in that reads
    and writes JSON."""
    (tmp_path / "slurm.conf").write_text("ClusterName=c1\n")
    (tmp_path / "scrun.lua").write_text(SCRUN_LUA)
    code = f"""
import scrun_cli.main, scrun_cli.create, scrun_anchor.main
from scrunlib.lua.records import StageContext
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm
from scrun_anchor.channel import ContainerStderr
from scrun_anchor.staging import load_stager
slurm = Slurm(SiteConfig(), {str(tmp_path / "slurm.conf")!r})
stager = load_stager(slurm, SiteConfig(), ContainerStderr())
context = StageContext("c1", "/b", "/s/", "/b/config.json", 7, 0, 0, ["A=1"], "/b/rootfs")
assert stager.stage_in(context).ok and stager.root_path == "/b/rootfs"
"""
    (path,) = (path for path in HOT_PATHS if "scrunlib.lua.stage" in path.entries)
    extra = modules_after(code)
    assert "lupa.lua54" in extra
    assert disallowed(path, extra - of_libraries(path)) == set()


def test_the_rules_are_not_vacuous():
    """A module a hot path must not import is reported."""
    path = HOT_PATHS[0]
    assert disallowed(path, {"scrunlib.state", "subprocess", "typing"}) == {"subprocess", "typing"}
    (lua,) = (path for path in HOT_PATHS if path.libraries)
    assert disallowed(lua, {"lupa", "lupa.lua54", "contextlib", "json"}) == {"contextlib", "json"}


def test_logging_at_every_level_and_format_imports_only_scrun_modules(tmp_path):
    """Every process logs, at any level: to a JSON --log file, a text file (stderr: the
    listing of this check)."""
    settings = (
        f"log.LogSettings(stderr=0, file=9, log_file={str(tmp_path / 'log.json')!r},"
        f" extra_file={str(tmp_path / 'anchor.log')!r}, extra_level=9)"
    )
    code = f"from scrunlib import log; log.configure({settings}); log.error('x'); log.debug('y', 5)"
    extra = modules_after(code)
    assert {name for name in extra if not name.startswith(("scrun", "__future__"))} == set()
    assert (tmp_path / "anchor.log").read_text().count("\n") == 2


def test_private_modules_are_the_public_ones():
    """scrun imports what `signal` and `socket` export from their built-in halves `_signal` and
    `_socket` (the public modules import enum: lint_tree/hotpath.py). Those are the same
    objects, so nothing private to the interpreter's implementation is relied on; this fails
    on a Python where they drift apart."""
    import _signal  # type: ignore[import-not-found]
    import _socket
    import signal
    import socket

    from scrunlib import signals

    for name in ("SIGINT", "SIGKILL", "SIGPIPE", "SIGRTMAX", "SIGTERM", "SIGXFSZ"):
        assert getattr(signals, name) == getattr(signal, name) == getattr(_signal, name)
    assert signals.set_handler is _signal.signal

    def handler(signum, frame):
        pass

    previous = signals.set_handler(signals.SIGXFSZ, handler)
    try:
        assert signal.getsignal(signal.SIGXFSZ) is handler
    finally:
        signal.signal(signal.SIGXFSZ, previous)
    assert _socket.AF_UNIX == socket.AF_UNIX and _socket.SOCK_STREAM == socket.SOCK_STREAM
    assert issubclass(socket.socket, _socket.socket)


def test_no_module_imports_json_privately():
    """CPython's `_json` scanner takes a context object whose fields change between
    versions (a new one in 3.15): scrun must not drive it."""
    sources = [*TREE.joinpath("shared").rglob("*.py"), *TREE.joinpath("tools").rglob("*.py")]
    assert sources
    for source in sources:
        assert not re.search(r"\b(from|import)\s+_json\b", source.read_text()), source
