"""docs/scrun-lua's scripts in Lua 5.1, the Lua Debian builds Slurm's own scrun against.

Each script's stage-in runs to its end under lupa's Lua 5.1 with a stand-in `slurm` table (no
Lua 5.2+ function such as table.unpack), copies only the bind mounts the nodes cannot see and
writes a config.json that points at the copies.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from lupa import lua51

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scrun-lua"
CONTAINER = "c1"
UID = 1000

CONFIG = {
    "root": {"path": "rootfs"},
    "process": {"args": ["sh", "-c", "exit 3"], "env": ["PATH=/bin"]},
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev/null", "type": "bind", "source": "/dev/null"},
        {"destination": "/data", "type": "bind", "source": "/home/u/data"},
        {"destination": "/etc/hosts", "type": "bind", "source": "/run/engine/c1/hosts"},
    ],
    "hooks": {"prestart": [{"path": "/usr/bin/engine-hook"}]},
    "linux": {"cgroupsPath": "engine.slice:c1", "namespaces": [{"type": "pid"}]},
}


def to_python(value: Any) -> Any:
    """A Lua table as JSON data: keys exactly 1..n make a list, others an object."""
    if lua51.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if items and set(items) == set(range(1, len(items) + 1)):
        return [to_python(items[i]) for i in range(1, len(items) + 1)]
    return {str(key): to_python(item) for key, item in items.items()}


class FakeSlurm:
    """The part of the `slurm` table the scripts call; commands are recorded, and `mkdir -p`
    is carried out so the script can write its config.json."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.commands: list[str] = []
        self.errors: list[str] = []
        self.bundle = ""

    def command(self, line: str) -> tuple[int, str]:
        self.commands.append(line)
        words = shlex.split(line)
        if words[:2] == ["mkdir", "-p"]:
            for path in words[4:]:
                Path(path).mkdir(parents=True, exist_ok=True)
        return 0, ""

    def table(self) -> Any:
        def log_error(form: str, *args: Any) -> None:
            self.errors.append(form)

        def set_bundle_path(path: str) -> None:
            self.bundle = path

        return self.runtime.table_from(
            {
                "SUCCESS": 0,
                "ERROR": -1,
                "allocator_command": self.command,
                "remote_command": self.command,
                "log_error": log_error,
                "from_json": lambda text: self.runtime.table_from(json.loads(text), recursive=True),
                "to_json": lambda value: json.dumps(to_python(value)),
                "set_bundle_path": set_bundle_path,
                "set_root_path": lambda path: None,
            }
        )


@pytest.mark.parametrize("name", ["shared-scratch.lua", "node-local.lua"])
def test_stage_in_runs_in_lua51(tmp_path: Path, name: str) -> None:
    scratch = tmp_path / "scratch"
    text = (DOCS / name).read_text()
    assert 'local scratch = "/scratch"\n' in text
    text = text.replace('local scratch = "/scratch"\n', f'local scratch = "{scratch}"\n')
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(CONFIG))

    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    slurm = FakeSlurm(runtime)
    runtime.globals().slurm = slurm.table()
    runtime.execute(text)
    stage_in = runtime.globals().slurm_scrun_stage_in
    rc = stage_in(CONTAINER, str(bundle), "/spool", str(bundle / "config.json"), 7, UID, UID, {})

    assert (rc, slurm.errors) == (0, [])
    copies = [c for c in slurm.commands if c.startswith("cp -a -- ")]
    assert copies and all("/run/engine/c1/hosts" in c for c in copies), slurm.commands
    staged = scratch / str(UID) / "scrun" / CONTAINER
    written = json.loads((staged / "config.json").read_text())
    assert written["process"] == CONFIG["process"]
    assert "hooks" not in written and "cgroupsPath" not in written["linux"]
    sources = [mount["source"] for mount in written["mounts"]]
    assert sources[:3] == ["proc", "/dev/null", "/home/u/data"]
    assert sources[3].endswith(f"/{CONTAINER}/mounts/4")
    assert slurm.bundle.endswith(f"/{CONTAINER}")
