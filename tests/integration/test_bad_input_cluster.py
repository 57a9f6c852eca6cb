"""The bad-input campaign's part that needs the real Slurm (tests/unit/test_bad_input.py
has the thousands of cases against a fake one): `scrun create` with cut and mistyped
config.json files, hostile SCRUN_* values and a hostile environment, on the cluster. Each
case ends with exit 0 (then `delete`) or one error line, within CASE_SECONDS; afterwards
squeue has no job tagged with any of the ids and the root holds no container.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from scrunlib.job_options import VARIABLES
from scrunlib.slurm_commands import job_tag

if TYPE_CHECKING:
    from conftest import Cluster

SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
CASE_SECONDS = 60.0
SEED = 21
HOSTILE_TEXT = ["", "-1", "9" * 40, "--partition=second", "a\nb", "$(id)", "x" * 5000, "\udcff"]


def test_bad_input_on_the_cluster(
    cluster: Cluster, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    rng = random.Random(SEED)
    root = tmp_path / "root"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "rootfs").symlink_to(Path(cluster.bundle) / "rootfs")
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["process"].update(args=["true"], terminal=False)
    text = json.dumps(config).encode()
    cases: list[tuple[bytes, dict[str, str]]] = []
    cases += [(text[:cut], {}) for cut in range(0, len(text), max(len(text) // 15, 1))]
    for path, value in (
        (("process", "args"), [1]),
        (("process", "env"), {"A": 1}),
        (("process", "cwd"), "relative"),
        (("root", "path"), ""),
        (("root",), None),
        (("process", "args"), ["\ud800"]),
        (("linux",), [1, 2]),
        (("mounts",), "x"),
        (("annotations",), {"a": 1}),
    ):
        changed = json.loads(text)
        target = changed
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        cases.append((json.dumps(changed).encode(), {}))
    for variable in rng.sample([v.name for v in VARIABLES], 12):
        cases.append((text, {variable: rng.choice(HOSTILE_TEXT)}))
    cases.append((text, {"SALLOC_PARTITION": "nope", "SLURM_TIMELIMIT": "x", "SQUEUE_FORMAT": "%"}))
    cases.append((text, {"SCRUN_PARTITION": "nope"}))  # Slurm refuses it: no job either
    ids = []
    messages = []
    for number, (config_text, extra) in enumerate(cases):
        container_id = f"bad{number}"
        ids.append(container_id)
        (bundle / "config.json").write_bytes(config_text)
        env = {**cluster.env, **extra}
        started = time.monotonic()
        argv = [SCRUN, "--root", str(root), "create", "--bundle", str(bundle), container_id]
        out, err = tmp_path / "out", tmp_path / "err"
        with out.open("w") as stdout, err.open("w") as stderr:  # the anchor keeps them
            code = subprocess.run(
                argv,
                env=env,  # \udcff: the byte 0xff, as os.environ would hold it
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                timeout=CASE_SECONDS,
                check=False,
            ).returncode
        message = err.read_text(errors="replace")
        messages.append(message if code else "created")
        case = f"case {number} {extra}: exit {code}, {message!r}"
        assert time.monotonic() - started < CASE_SECONDS, case
        assert "Traceback" not in message, case
        if code == 0:
            deleted = subprocess.run(
                [SCRUN, "--root", str(root), "delete", "--force", container_id],
                env=cluster.env, capture_output=True, text=True, timeout=CASE_SECONDS,
                check=False,
            )  # fmt: skip
            assert deleted.returncode == 0, deleted.stderr
        else:
            lines = message.splitlines()
            assert len(lines) == 1 and lines[0].startswith("scrun: error: "), case
        entries = [p.name for p in root.glob("*") if not p.name.startswith(".")]
        assert entries == [], case
    assert len(cases) > 35
    # the campaign reached Slurm: jobs were created (then deleted) and refused
    assert "created" in messages, messages
    assert any("allocation refused" in message for message in messages), messages
    squeue = cluster.run(["squeue", "-h", "-o", "%k"], timeout=30)
    assert squeue.returncode == 0, squeue.stderr
    tags = {job_tag(container_id) for container_id in ids}
    assert tags.isdisjoint(squeue.stdout.split()), squeue.stdout
