"""bench/hooks.py -- what a staging scrun.lua's own commands cost, without Slurm.

Runs the stage-in and stage-out hooks of each script given, for real, on a bundle podman made
(`podman --runtime crun create` + `init`: its config.json, with its bind mounts of hosts,
resolv.conf, ..., and its root filesystem mounted), under Lua 5.1 with a stand-in `slurm`
table whose commands run with /bin/sh (remote ones as on the job's first node), as root.
Two cases, in interleaved rounds: the container writes nothing (`true`), and it writes a
file to a bind mount the nodes cannot see (`-v DIR:/out`). Prints each script's stage-in,
stage-out and both, median and range in ms. The scratch and the nodes' disk are dirs under
/var/tmp.

Usage: .venv/bin/python bench/hooks.py RUNS SCRIPT.lua...   (needs podman and
localhost/busybox: the harness's podman setup; no cluster, no lock)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lupa import lua51

IMAGE = "localhost/busybox"


def to_python(value: Any) -> Any:
    """A Lua table as JSON data: keys exactly 1..n make a list, others an object."""
    if lua51.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if items and set(items) == set(range(1, len(items) + 1)):
        return [to_python(items[i]) for i in range(1, len(items) + 1)]
    return {str(key): to_python(item) for key, item in items.items()}


def shell(line: str, node: bool = False) -> tuple[int, str]:
    env = {"PATH": os.environ["PATH"], **({"SLURM_NODEID": "0"} if node else {})}
    done = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def podman(*args: str) -> str:
    """podman's output, stripped; a failure ends the benchmark."""
    return subprocess.run(
        ["podman", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


class Script:
    """One scrun.lua, loaded with `scratch` and `node_local` under `top`."""

    def __init__(self, path: str, top: Path) -> None:
        self.runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
        self.errors: list[str] = []
        self.paths = {"bundle": "", "root": ""}
        runtime = self.runtime
        runtime.globals().slurm = runtime.table_from(
            {
                "SUCCESS": 0,
                "ERROR": -1,
                "allocator_command": shell,
                "remote_command": lambda line: shell(line, node=True),
                "log_error": lambda form, *args: self.errors.append(form % tuple(args)),
                "from_json": lambda text: runtime.table_from(json.loads(text), recursive=True),
                "to_json": lambda value: json.dumps(to_python(value)),
                "set_bundle_path": lambda path: self.paths.__setitem__("bundle", path),
                "set_root_path": lambda path: self.paths.__setitem__("root", path),
            }
        )
        text = Path(path).read_text()
        text = text.replace('local scratch = "/scratch"\n', f'local scratch = "{top}/scratch"\n')
        text = text.replace('local node_local = "/tmp"\n', f'local node_local = "{top}/node"\n')
        runtime.execute(text)

    def run(self, bundle: Path, config: Path, rootfs: str, out: int | None) -> tuple[float, float]:
        """(stage-in, stage-out) in ms; with `out`, the container writes to that mount."""
        hooks = self.runtime.globals()
        start = time.perf_counter()
        rc = hooks.slurm_scrun_stage_in("c1", str(bundle), "/spool", str(config), 7, 0, 0, {})
        staged = time.perf_counter()
        if rc != 0:
            sys.exit(f"stage-in failed: {self.errors}")
        if out is not None:
            time.sleep(0.02)  # file times tick every few ms; a container starts much later
            Path(self.paths["bundle"], "mounts", str(out), "f").write_text("x\n")
            staged += 0.02
        rc = hooks.slurm_scrun_stage_out(
            "c1", self.paths["bundle"], str(bundle), self.paths["root"], rootfs,
            "/spool", str(config), 7, 0, 0,
        )  # fmt: skip
        end = time.perf_counter()
        if rc != 0:
            sys.exit(f"stage-out failed: {self.errors}")
        return (staged - start) * 1000, (end - staged) * 1000


def main() -> None:
    runs, scripts = int(sys.argv[1]), sys.argv[2:]
    top = Path(tempfile.mkdtemp(prefix="scrun-bench-hooks.", dir="/var/tmp"))
    name = top.name
    try:
        for sub in ("scratch", "node"):
            (top / sub).mkdir(mode=0o1777)
            (top / sub).chmod(0o1777)
        (top / "data").mkdir()
        podman("--runtime", "crun", "create", "--name", name, IMAGE, "true")
        podman("init", name)
        rootfs = podman("mount", name)
        userdata = podman("inspect", "-f", "{{.StaticDir}}", name)
        config = json.loads(Path(userdata, "config.json").read_text())
        config["root"]["path"] = rootfs
        bundle = top / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(config))
        mounts = config["mounts"]
        mounts.append({"destination": "/out", "type": "bind", "source": str(top / "data")})
        (bundle / "config-v.json").write_text(json.dumps(config))
        loaded = [Script(path, top) for path in scripts]
        times: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for _ in range(runs):
            for i, script in enumerate(loaded):
                times.setdefault((i, "true"), []).append(
                    script.run(bundle, bundle / "config.json", rootfs, None)
                )
                times.setdefault((i, "-v"), []).append(
                    script.run(bundle, bundle / "config-v.json", rootfs, len(mounts))
                )
        for (i, case), pairs in times.items():
            figures = []
            for what, values in (
                ("stage-in", [a for a, _ in pairs]),
                ("stage-out", [b for _, b in pairs]),
                ("both", [a + b for a, b in pairs]),
            ):
                figures.append(
                    f"{what} {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
                )
            print(f"{scripts[i]} {case}: " + ", ".join(figures) + " ms")
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
