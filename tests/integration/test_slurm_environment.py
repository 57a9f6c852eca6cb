"""The environment policy on real jobs (docs/scrun-variables.md, "What steers the job"):
Slurm's own input variables in the caller's environment reach none of the Slurm commands
scrun runs; SCRUN_* variables steer the job. Through `scrun run` (the whole environment is
scrun's) and through podman (podman 4.3 passes the runtime an almost empty environment,
podman 5 its caller's: the same assertions hold for both).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from helpers import wait_for

if TYPE_CHECKING:
    from conftest import Cluster, Podman

SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
# What a user may keep in a shell: each would change the job or its step if it reached
# salloc or srun (another partition, a one-minute limit, two tasks: the output twice), or
# break scrun's squeue and scancel calls.
HOSTILE = {
    "SALLOC_PARTITION": "second",
    "SALLOC_TIMELIMIT": "1",
    "SBATCH_PARTITION": "second",
    "SLURM_TIMELIMIT": "1",
    "SLURM_NTASKS": "2",
    "SRUN_NTASKS": "2",
    "SLURM_NNODES": "2",
    "SQUEUE_FORMAT": "%all",
    "SQUEUE_SORT": "bogus",
    "SCANCEL_INTERACTIVE": "1",
    "SCONTROL_FEDERATION": "1",
}


def job_named(cluster: Cluster, name: str) -> dict[str, str]:
    """The record of the (ended or running) job named `name`; JobName holds no space here."""

    def probe() -> dict[str, str] | None:
        return next((r for r in cluster.job_records() if r.get("JobName") == name), None)

    return dict(wait_for(f"the job named {name}", probe))


def test_scrun_run_ignores_slurms_input_variables(
    cluster: Cluster, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    name = f"envp-{uuid.uuid4().hex[:8]}"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["process"].update(args=["echo", "hi"], terminal=False)
    (bundle / "config.json").write_text(json.dumps(config))
    (bundle / "rootfs").symlink_to(Path(cluster.bundle) / "rootfs")
    env = {**cluster.env, **HOSTILE, "SCRUN_JOB_NAME": name, "SCRUN_TIMELIMIT": "7"}
    done = subprocess.run(
        [SCRUN, "--root", str(tmp_path / "root"), "run", "--bundle", str(bundle), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr  # one task, not two
    record = job_named(cluster, name)
    assert (record["Partition"], record["TimeLimit"]) == ("debug", "00:07:00"), record
    assert record["NumNodes"] == "1"


def test_podman_run_ignores_slurms_input_variables(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """The variables both in podman's environment and in the container's (`-e`, i.e.
    config.json process.env, which scrun reads for SCRUN_*)."""
    name = f"envp-{uuid.uuid4().hex[:8]}"
    options = [arg for item in HOSTILE.items() for arg in ("-e", "=".join(item))]
    done = podman(
        "--runtime", "scrun", "run", "--rm", *options, "-e", f"SCRUN_JOB_NAME={name}",
        "localhost/busybox", "echo", "hi",
        env={**cluster.env, **HOSTILE},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr
    record = job_named(cluster, name)
    assert (record["Partition"], record["TimeLimit"]) == ("debug", "UNLIMITED"), record


def test_scrun_variables_still_steer_the_job(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """What the policy keeps: the same move asked for with SCRUN_* works."""
    name = f"envp-{uuid.uuid4().hex[:8]}"
    done = podman(
        "--runtime", "scrun", "run", "--rm", "-e", "SCRUN_PARTITION=second",
        "-e", f"SCRUN_JOB_NAME={name}", "localhost/busybox", "true",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert job_named(cluster, name)["Partition"] == "second"
