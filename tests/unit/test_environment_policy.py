"""One environment policy for every Slurm command scrun runs: the caller's Slurm input
variables (SALLOC_*, SQUEUE_*, SLURM_*, ...) never reach them; SLURM_CONF is scrun's own.
The commands here are scripts that write down the environment they got."""

import os
from pathlib import Path

import pytest
from scrunlib.lua.commands import command_env
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm
from scrunlib.slurm_commands import command_environment

HOSTILE = {
    "SALLOC_PARTITION": "second",
    "SBATCH_TIMELIMIT": "1",
    "SRUN_CPUS_PER_TASK": "9",
    "SQUEUE_FORMAT": "%all",
    "SCANCEL_SIGNAL": "KILL",
    "SCONTROL_ALL": "1",
    "SLURM_TIMELIMIT": "1",
    "SLURM_CONF": "/caller/slurm.conf",
    "SLURM_JOB_ID": "999",
}


def test_command_environment_drops_slurm_input_variables_and_adds_scruns_own():
    environ = {**HOSTILE, "PATH": "/bin", "SCRUN_PARTITION": "p", "HOME": "/h"}
    env = command_environment(environ, {"SLURM_CONF": "/site/slurm.conf"})
    assert env == {
        "PATH": "/bin",
        "SCRUN_PARTITION": "p",
        "HOME": "/h",
        "SLURM_CONF": "/site/slurm.conf",
    }


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Slurm:
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, answer in (
        ("scancel", ""),
        ("squeue", 'echo "12 scrun:c1"'),
        ("salloc", 'echo "salloc: error: refused" >&2; exit 1'),
    ):
        (bin_dir / name).write_text(f'#!/bin/sh\nenv > "$0.env"\n{answer}\n')
        (bin_dir / name).chmod(0o755)
    (bin_dir / "srun").write_text('#!/bin/sh\necho "slurm 22.05.8"\n')
    (bin_dir / "srun").chmod(0o755)
    return Slurm(SiteConfig(bin_dir=str(bin_dir)), "/site/slurm.conf")


def environment_of(slurm: Slurm, command: str) -> dict[str, str]:
    text = Path(slurm.path(command) + ".env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def assert_policy(env: dict[str, str]) -> None:
    assert env["SLURM_CONF"] == "/site/slurm.conf"
    leaked = {name for name in env if name in HOSTILE and name != "SLURM_CONF"}
    assert leaked == set()
    assert "PATH" in env


def test_every_way_scrun_runs_a_slurm_command_follows_it(slurm: Slurm):
    from scrunlib.errors import SlurmError

    slurm.cancel_tagged("c1")  # squeue through plumbum, then scancel through subprocess
    assert_policy(environment_of(slurm, "squeue"))
    assert_policy(environment_of(slurm, "scancel"))
    with pytest.raises(SlurmError, match="refused"):
        slurm.allocate("scrun", "c1", [])  # salloc through posix_spawn
    assert_policy(environment_of(slurm, "salloc"))
    assert os.environ["SALLOC_PARTITION"] == "second"  # scrun's own environment is unchanged


def test_lua_commands_without_a_job_env_get_scruns_environment_by_the_same_policy(slurm):
    env = command_env([])
    assert "SALLOC_PARTITION" not in env and "SLURM_JOB_ID" not in env
    assert env["PATH"] == os.environ["PATH"]
    job_env = ["SLURM_JOB_ID=5", "SLURM_CONF=/x"]  # the job env scrun builds is kept whole
    assert command_env(job_env) == {"SLURM_JOB_ID": "5", "SLURM_CONF": "/x"}
