"""scrun pause / resume / ps / update: the Slurm commands they compose (pytest-subprocess),
the node script of `ps` (run here with a stand-in scontrol), the `paused` status."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from scrun_cli.main import main
from scrun_cli.update import requested, set_fields
from scrunlib import container_steps
from scrunlib.container_steps import ps_script, ps_table
from scrunlib.errors import InvalidInput
from scrunlib.slurm_commands import time_limit_argv
from scrunlib.spool import Spool
from scrunlib.state import TRANSITIONS, ContainerState, Status, process_start_time

JOB = 41
# `squeue -h -s -j 41 -o "%i %j"`: the container's step, an exec step, another step
STEPS = f"{JOB}.0 scrun\n{JOB}.2 scrun-exec\n{JOB}.3 lua-command\n"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site file naming a bin dir of (never run) Slurm commands; XDG_RUNTIME_DIR the root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("srun", "scancel", "scontrol", "squeue"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=unit\n")
    config = tmp_path / "scrun.toml"
    config.write_text(f'bin_dir = "{bin_dir}"\nslurm_conf = "{tmp_path / "slurm.conf"}"\n')
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(config))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    for name in ("SCRUN_DEBUG", "SCRUN_STDERR_DEBUG", "SCRUN_FILE_DEBUG", "SLURM_CONF"):
        monkeypatch.delenv(name, raising=False)
    return bin_dir


def container(tmp_path: Path, status: str = Status.RUNNING, **fields: object) -> Spool:
    """A container whose anchor is this test process (alive), in job JOB on n[1-2], its
    step launched (step_pid)."""
    fields.setdefault("step_pid", os.getpid())
    fields.setdefault("anchor_pid", os.getpid())
    fields.setdefault("anchor_start_time", process_start_time(os.getpid()))
    spool = Spool(str(tmp_path / "scrun"), "c1")
    os.makedirs(spool.root, mode=0o700, exist_ok=True)
    spool.create()
    ContainerState(
        id="c1", bundle="/b", rootfs="/b/rootfs", status=status, job_id=JOB, nodes="n[1-2]",
        **fields,
    ).save(spool)  # fmt: skip
    return spool


def status_of(spool: Spool) -> str:
    return ContainerState.load(spool).effective_status()


def test_paused_is_a_status_between_running_and_stopped():
    assert TRANSITIONS[Status.RUNNING] == {Status.PAUSED, Status.STOPPING}
    assert TRANSITIONS[Status.PAUSED] == {Status.RUNNING, Status.STOPPING}
    assert Status.PAUSED not in TRANSITIONS[Status.CREATED]


def test_pause_freezes_the_container_and_exec_steps_then_resume_thaws(fp, site, tmp_path, capsys):
    spool = container(tmp_path)
    squeue = [str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"]
    for signal in (19, 18):  # SIGSTOP, then SIGCONT
        fp.register(squeue, stdout=STEPS)
        for step in (0, 2):  # not the lua-command step: not the container's
            fp.register([str(site / "scancel"), f"--signal={signal}", f"{JOB}.{step}"])
    assert main(["pause", "c1"]) == 0
    for step in (0, 2):
        stop = [str(site / "scancel"), "--signal=19", f"{JOB}.{step}"]
        assert fp.call_count(stop) == 1, step
    assert status_of(spool) == Status.PAUSED
    assert json.loads(Path(spool.state_file).read_text())["status"] == "running"  # the anchor's
    assert main(["pause", "c1"]) == 0  # already paused: nothing to do, no Slurm call
    assert main(["resume", "c1"]) == 0
    cont = [str(site / "scancel"), "--signal=18", f"{JOB}.2"]
    assert fp.call_count(cont) == 1
    assert status_of(spool) == Status.RUNNING and not os.path.exists(spool.paused_file)
    assert main(["resume", "c1"]) == 0  # already running: nothing to do
    assert capsys.readouterr() == ("", "")


def test_pause_in_a_joined_job_leaves_other_exec_steps_alone(fp, site, tmp_path):
    container(tmp_path, existing_job=True)
    fp.register([str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"], stdout=STEPS)
    fp.register([str(site / "scancel"), "--signal=19", f"{JOB}.0"])
    assert main(["pause", "c1"]) == 0
    assert fp.call_count([str(site / "scancel"), fp.any()]) == 1


@pytest.mark.parametrize(
    ("argv", "status", "needle"),
    [
        (["pause", "c1"], Status.CREATED, "is created: cannot pause"),
        (["resume", "c1"], Status.CREATED, "is created: cannot resume"),
        (["pause", "c1"], Status.STOPPED, "is stopped: cannot pause"),
        (["ps", "c1"], Status.CREATED, "is created: no processes to list"),
        (["pause", "c1"], Status.STOPPING, "is stopping: cannot pause"),
        (["exec", "c1", "true"], Status.STOPPING, "is stopping: cannot exec"),
        (["start", "c1"], Status.STOPPING, "'c1' has already stopped"),
        (["start", "c1"], Status.RUNNING, "'c1' is running: cannot start"),
    ],
)
def test_commands_refuse_a_container_in_the_wrong_state(
    site, tmp_path, capsys, argv, status, needle
):
    container(tmp_path, status=status)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_kill_of_a_stopping_container_succeeds_without_asking_its_anchor(site, tmp_path):
    """Its anchor is ending the container's tasks and staging out, and serves no request
    (no socket here: a request would fail)."""
    spool = container(tmp_path, status=Status.STOPPING)
    assert not os.path.exists(spool.socket)
    assert main(["kill", "c1", "KILL"]) == 0


@pytest.mark.parametrize("recorded", [Status.STOPPED, Status.RUNNING])
def test_kill_of_a_stopped_container_fails_unless_all(site, tmp_path, capsys, recorded):
    """Its anchor has gone (after recording the end, or killed before it could): the OCI
    runtime spec's error, runc's and crun's; `--all` (containerd's after a `--pid host`
    init has ended) succeeds, as runc's does."""
    spool = container(tmp_path, status=recorded, anchor_pid=ended_pid(), anchor_start_time=None)
    assert main(["kill", "c1", "KILL"]) == 1
    err = capsys.readouterr().err
    assert err == "scrun: error: container 'c1' is not running: cannot kill\n", err
    assert main(["kill", "--all", "c1", "9"]) == 0
    assert status_of(spool) == Status.STOPPED


def test_kill_of_a_stopped_container_whose_anchor_is_exiting_succeeds(site, tmp_path):
    """The anchor records the end, then exits: `podman stop`'s SIGKILL in between must not
    fail while the pid it checks is still there."""
    container(tmp_path, status=Status.STOPPED)
    assert main(["kill", "c1", "KILL"]) == 0


def ended_pid() -> int:
    """The pid of a process that has ended (and been reaped). (Spawned, not forked: pytest's
    process may have threads by now; not through subprocess, which pytest-subprocess fakes.)"""
    pid = os.posix_spawn("/bin/true", ["true"], {})
    os.waitpid(pid, 0)
    return pid


def test_pause_without_a_running_step_says_so(fp, site, tmp_path, capsys):
    """Its srun has ended and Slurm lists no step: asked once, no wait."""
    container(tmp_path, step_pid=ended_pid())
    fp.register([str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"], stdout="")
    assert main(["pause", "c1"]) == 1
    assert f"has no running step in job {JOB}" in capsys.readouterr().err
    assert status_of(Spool(str(tmp_path / "scrun"), "c1")) == Status.RUNNING


@pytest.mark.parametrize("argv", [["pause", "c1"], ["exec", "c1", "true"]])
def test_a_step_slurm_does_not_list_yet_is_waited_for(fp, site, tmp_path, monkeypatch, argv):
    """Right after `start` (podman run -d, then exec): srun runs (the step_pid, this
    process) but Slurm lists its step only a moment later. The command asks again."""
    monkeypatch.setattr(container_steps, "STEP_POLL_SECONDS", 0.0)
    container(tmp_path)
    (tmp_path / "oci.conf").write_text('RunTimeQuery="crun state %n.%u.%j.%s.%t"\n')  # exec's
    squeue = [str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"]
    fp.register(squeue, stdout="")
    fp.register(squeue, stdout=STEPS)
    fp.register([str(site / "scancel"), fp.any()], occurrences=2)  # pause
    fp.register(
        [str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %N"], stdout=f"{JOB}.0 n1\n"
    )
    fp.register([str(site / "scontrol"), "show", "hostnames", "n1"], stdout="n1\n")
    fp.register([str(site / "srun"), fp.any()])  # exec
    assert main(argv) == 0
    assert fp.call_count(squeue) == 2


def test_a_step_never_listed_is_waited_for_a_bounded_time(fp, site, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(container_steps, "STEP_POLL_SECONDS", 0.0)
    monkeypatch.setattr(container_steps, "STEP_LISTED_WITHIN", 0.05)
    container(tmp_path)
    squeue = [str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"]
    fp.register(squeue, stdout="", occurrences=1000)
    assert main(["exec", "c1", "true"]) == 1
    assert "has no running step: cannot exec" in capsys.readouterr().err


def test_pause_while_the_job_is_queued_says_so(fp, site, tmp_path, capsys):
    container(tmp_path, step_pid=None, job_state="PENDING")
    assert main(["pause", "c1"]) == 1
    assert f"has no process to pause yet: job {JOB} waits in the queue" in capsys.readouterr().err
    assert status_of(Spool(str(tmp_path / "scrun"), "c1")) == Status.RUNNING


def test_ps_runs_one_task_per_node_of_the_job(fp, site, tmp_path, capsys):
    container(tmp_path)
    fp.register([str(site / "squeue"), "-h", "-s", "-j", str(JOB), "-o", "%i %j"], stdout=STEPS)
    srun = [str(site / "srun"), "--jobid", str(JOB), "--quiet", "--job-name", "scrun-ps",
            "--ntasks-per-node=1", "--overlap", "--chdir=/", "--nodelist=n[1-2]",
            "--", "/bin/sh", "-c", fp.any(min=1, max=1)]  # fmt: skip
    fp.register(srun, stdout="n2\tPID CMD\nn2\t7 sleep\nn1\tPID CMD\nn1\t5 sleep\n")
    assert main(["ps", "c1", "-o", "pid,comm"]) == 0
    assert capsys.readouterr().out == "NODE  PID CMD\nn1    5 sleep\nn2    7 sleep\n"
    script = fp.calls[-1][-1]
    assert f"listpids {JOB}.0" in script and f"listpids {JOB}.2" in script
    assert "ps -o pid,comm -p" in script


def test_ps_json_is_refused_naming_the_nodes(site, tmp_path, capsys):
    container(tmp_path)
    assert main(["ps", "--format", "json", "c1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"run on n[1-2] (Slurm job {JOB}), not on this host" in err and "scrun ps c1" in err


def test_the_ps_script_lists_the_pids_slurmstepd_gives(tmp_path):
    """The node script, run here: a stand-in scontrol lists this process as the step's."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\n"
        'echo "PID      JOBID    STEPID   LOCALID GLOBALID"\n'
        f'[ "$2" = "{JOB}.0" ] && echo "{os.getpid()}    {JOB}   0   0   0"\n'
        'echo "scontrol: error: not on this node" >&2; exit 1\n'
    )
    scontrol.chmod(0o755)
    script = ps_script(str(scontrol), JOB, [0, 2], ["-o", "pid="])
    done = subprocess.run(
        ["/bin/sh", "-c", script], env={"PATH": os.environ["PATH"], "SLURMD_NODENAME": "n7"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    node, _, pid = done.stdout.partition("\t")
    assert (node, pid.strip()) == ("n7", str(os.getpid())), done.stdout


def test_the_ps_script_prints_nothing_on_a_node_without_the_steps(tmp_path):
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\nexit 1\n")
    scontrol.chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", "-c", ps_script(str(scontrol), JOB, [0], ["-f"])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")


def test_ps_table_of_no_output_is_empty():
    assert ps_table("") == ""
    assert ps_table("srun: warning\n") == ""


# -- update ---------------------------------------------------------------------------


def test_docker_zeros_ask_for_nothing_but_what_they_set():
    sent = {
        "memory": {"limit": 268435456, "reservation": 0, "swap": 536870912, "kernel": 0},
        "cpu": {"shares": 0, "quota": 0, "period": 0},
        "blockIO": {"weight": 0},
    }
    assert set_fields(sent) == ["memory.limit", "memory.swap"]
    assert set_fields({"cpu": {"cpus": ""}, "pids": None}) == []


def test_update_refuses_resources_in_one_line_and_applies_nothing(fp, site, tmp_path, capsys):
    container(tmp_path)
    resources = tmp_path / "r.json"
    resources.write_text('{"cpu": {"quota": 100000, "period": 100000}}')
    argv = ["update", "--time-limit", "5", "--resources", str(resources), "c1"]
    assert main(argv) == 1  # no Slurm command registered: none may run
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cpu.period, cpu.quota cannot change for a running Slurm job" in err
    assert "supports only --time-limit" in err
    assert main(["update", "--pids-limit", "10", "c1"]) == 1
    assert "pids.limit cannot change" in capsys.readouterr().err


def test_update_time_limit_is_scontrol_update(fp, site, tmp_path):
    container(tmp_path)
    update = [str(site / "scontrol"), "update", f"JobId={JOB}", "TimeLimit=1:30:00"]
    fp.register(update)
    assert main(["update", "--time-limit", "1:30:00", "c1"]) == 0
    assert fp.call_count(update) == 1


def test_update_in_a_joined_job_is_refused(site, tmp_path, capsys):
    container(tmp_path, existing_job=True)
    assert main(["update", "--time-limit", "5", "c1"]) == 1
    assert "which it joined" in capsys.readouterr().err


@pytest.mark.parametrize("limit", ["", "5 6", "5=6"])
def test_a_time_limit_cannot_smuggle_another_field(limit):
    with pytest.raises(InvalidInput, match="invalid time limit"):
        time_limit_argv("scontrol", JOB, limit)


def test_runc_options_count_as_requests():
    assert requested({"memory": "1m", "cpu-quota": "0"}) == ["memory.limit"]
