"""A container whose anchor died between stage-in and stage-out: `scrun delete` runs
scrun.lua's stage-out with the arguments the anchor would have passed."""

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest
from fake_steps import FakeSteps
from scrun_cli.main import main
from scrunlib.lua.records import StageContext
from scrunlib.spool import Spool
from scrunlib.stageout import PendingStageOut
from scrunlib.state import ContainerState, Status, process_start_time
from waiting import wait_for

RECORDING_SCRIPT = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
		job_env)
	return slurm.SUCCESS
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	local out = io.open(OUT, "w")
	out:write(table.concat({id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id}, "|"))
	out:close()
	return RESULT
end
return slurm.SUCCESS
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """slurm.conf and scrun.lua in `etc`; Slurm's commands in `bin` (never run: faked)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=unit\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "scancel", "scontrol"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 99\n")
        (bin_dir / name).chmod(0o755)
    config = tmp_path / "scrun.toml"
    config.write_text(f'slurm_conf = "{etc / "slurm.conf"}"\nbin_dir = "{bin_dir}"\n')
    monkeypatch.setattr("scrunlib.slurm.STEP_POLL_SECONDS", 0.01)
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(config))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("SCRUN_DEBUG", raising=False)
    return etc


@pytest.fixture
def steps(fp, tmp_path) -> FakeSteps:
    """Job 77's steps: none left, unless a test says otherwise."""
    return FakeSteps(fp, str(tmp_path / "bin"), 77, {})


def crashed_container(tmp_path, etc, result="slurm.SUCCESS", **fields):
    """State of a container whose anchor is gone (pid 0) after stage-in, job already ended
    (unless `fields` say otherwise)."""
    fields.setdefault("job_ended", True)
    out = tmp_path / "stage-out-args"
    script = etc / "scrun.lua"
    script.write_text(f"OUT = {json.dumps(str(out))}\nRESULT = {result}\n{RECORDING_SCRIPT}")
    spool = Spool(str(tmp_path / "run" / "scrun"), "crashed")
    spool.create()
    ContainerState(
        "crashed", "/scratch/crashed", "/scratch/crashed/rootfs",
        status=Status.RUNNING, job_id=77, **fields,
    ).save(spool)  # fmt: skip
    context = StageContext(
        container_id="crashed",
        bundle="/home/u/bundle",
        spool_dir=spool.dir_for_scripts,
        config_file="/home/u/bundle/config.json",
        job_id=77,
        user_id=1000,
        group_id=1001,
        job_env=("SLURM_JOB_ID=77",),
        root_path="/home/u/bundle/rootfs",
        orig_bundle="/home/u/bundle",
    )
    PendingStageOut(
        context,
        bundle="/scratch/crashed",
        root_path="/scratch/crashed/rootfs",
        script=str(script),
        slurm_conf=str(etc / "slurm.conf"),
    ).save(spool)
    return spool, out


def test_delete_stages_out_for_a_dead_anchor(tmp_path, site, steps, capsys):
    spool, out = crashed_container(tmp_path, site)
    assert main(["delete", "crashed"]) == 0
    assert steps.events == ["squeue: none"]  # its tasks had ended
    assert out.read_text().split("|") == [
        "crashed", "/scratch/crashed", "/home/u/bundle", "/scratch/crashed/rootfs",
        "/home/u/bundle/rootfs", spool.dir_for_scripts, "/home/u/bundle/config.json",
        "77", "1000", "1001",
    ]  # fmt: skip
    assert not os.path.isdir(spool.path)
    assert capsys.readouterr().err == ""


def test_a_failed_stage_out_is_reported_and_the_delete_goes_on(tmp_path, site, steps, capsys):
    spool, out = crashed_container(tmp_path, site, result="slurm.ERROR")
    assert main(["delete", "crashed"]) == 0
    assert out.exists()
    err = capsys.readouterr().err
    assert "stage-out of container crashed failed" in err and err.count("\n") == 1
    assert not os.path.isdir(spool.path)


def test_a_vanished_script_is_reported_and_the_delete_goes_on(tmp_path, site, steps, capsys):
    spool, _ = crashed_container(tmp_path, site)
    (site / "scrun.lua").unlink()
    assert main(["delete", "crashed"]) == 0
    assert "scrun.lua is gone" in capsys.readouterr().err
    assert not os.path.isdir(spool.path)


def test_nothing_pending_means_no_lua(tmp_path, site, steps):
    spool, out = crashed_container(tmp_path, site)
    PendingStageOut.clear(spool)
    PendingStageOut.clear(spool)  # idempotent
    assert PendingStageOut.load(spool) is None
    assert main(["delete", "crashed"]) == 0
    assert not out.exists()
    assert steps.events == []  # and no Slurm command: the job had ended


def test_delete_stages_out_only_once_the_dead_anchors_tasks_have_ended(
    tmp_path, site, fp, monkeypatch
):
    """The anchor died while its container ran. Killing its srun (here) does not end the
    container's tasks on the node: its steps (its own, its exec steps) are cancelled in
    Slurm, stage-out runs only once squeue lists none of them, then the job is ended."""
    fp.allow_unregistered(True)
    srun = subprocess.Popen(["sleep", "60"])  # the step's srun the anchor left
    spool, out = crashed_container(
        tmp_path, site, job_ended=False,
        step_pid=srun.pid, step_start_time=process_start_time(srun.pid),
    )  # fmt: skip
    steps = FakeSteps(fp, str(tmp_path / "bin"), 77, {0: "scrun", 1: "scrun-exec", 2: "x"}, 2)
    original = PendingStageOut.run

    def run(pending: PendingStageOut, site_config: object) -> None:
        steps.events.append("stage-out")
        original(pending, site_config)  # type: ignore[arg-type]

    monkeypatch.setattr(PendingStageOut, "run", run)
    try:
        assert main(["delete", "crashed"]) == 0
        assert srun.wait(timeout=10) == -signal.SIGKILL
    finally:
        srun.kill()
    listed = "77.0 scrun\n77.1 scrun-exec\n77.2 x"
    assert steps.events == [
        f"squeue: {listed}",
        "scancel 77.0",
        "scancel 77.1",
        f"squeue: {listed}",
        f"squeue: {listed}",
        "squeue: 77.2 x",
        "stage-out",
        "scancel 77",  # the job, last
    ]
    assert out.exists() and not os.path.isdir(spool.path)


def test_the_record_round_trips(tmp_path, site):
    spool, _ = crashed_container(tmp_path, site)
    pending = PendingStageOut.load(spool)
    assert pending is not None
    assert pending.context.job_env == ("SLURM_JOB_ID=77",)
    assert (pending.bundle, pending.root_path) == ("/scratch/crashed", "/scratch/crashed/rootfs")


def test_delete_waits_killwait_for_the_tasks_of_a_job_slurm_is_ending(tmp_path, site, fp):
    """A job cancelled from outside keeps its tasks until KillWait (slurm.conf) ends them,
    longer than step_grace at most sites (30 s against 10): delete waits for them that
    long and step_grace more, then stages out, so what they wrote comes back."""
    with (tmp_path / "scrun.toml").open("a") as config:
        config.write("step_grace = 0.2\n")
    spool, out = crashed_container(tmp_path, site, job_ended=False)
    steps = FakeSteps(fp, str(tmp_path / "bin"), 77, {0: "scrun"}, lingers=60, kill_wait=2)
    assert main(["delete", "crashed"]) == 0
    assert out.exists()  # stage-out ran
    assert steps.events[-2:] == ["squeue: none", "scancel 77"]
    assert not os.path.isdir(spool.path)


# `scrun delete` forks its finisher with one thread; pytest's process may hold other
# tests' threads, and Python 3.12+ warns at each fork then.
FORKS = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


@pytest.fixture
def finisher(monkeypatch):
    """The deferred stage-out's process asks Slurm every 0.01 s, for 1 s at most."""
    monkeypatch.setattr("scrun_cli.delete.FINISH_POLL_SECONDS", 0.01)
    monkeypatch.setattr("scrun_cli.delete.FINISH_LATER_SECONDS", 1.0)


@FORKS
def test_a_stage_out_whose_tasks_outlive_their_cancel_runs_once_they_have_ended(
    tmp_path, site, fp, capsys, finisher
):
    """A step Slurm still lists KillWait + step_grace seconds after its cancel (a task
    that ignores SIGKILL, until Slurm gives up on it): its tasks may still write, so the
    delete does not stage out (one line says so); it ends the job and completes, and a
    process of its own runs the stage-out once Slurm lists the step no more, with the copy
    of the container's config the spool keeps (the engine removes its bundle), then
    removes the spool: what the container wrote still comes back."""
    with (tmp_path / "scrun.toml").open("a") as config:
        config.write("step_grace = 0.2\n")
    spool, out = crashed_container(tmp_path, site, job_ended=False)
    bundle_config = tmp_path / "config.json"  # the engine's: gone once the delete returns
    bundle_config.write_text('{"mounts": []}')
    pending = PendingStageOut.load(spool)
    assert pending is not None
    pending.context.config_file = str(bundle_config)
    pending.save(spool)
    steps = FakeSteps(fp, str(tmp_path / "bin"), 77, {0: "scrun"}, lingers=60)
    steps.job_cancelled = True  # the job's cancel does not end the step either
    began = time.monotonic()
    assert main(["delete", "crashed"]) == 0
    assert time.monotonic() - began < 5
    assert steps.events[-1] == "scancel 77"  # the job, ended
    assert not out.exists() and os.path.isdir(spool.path)  # not yet: the step is listed
    err = capsys.readouterr().err
    assert (
        "stage-out of container crashed deferred: its steps in job 77 still run 0.2 s after "
        "they were cancelled; it runs once Slurm says they have ended"
    ) in err
    bundle_config.unlink()
    wait_for("stage-out", out.exists)
    wait_for("removal of the spool", lambda: not os.path.isdir(spool.path))
    config_file = out.read_text().split("|")[6]  # the spool's copy of the config, read
    assert config_file == os.path.join(spool.path, "stage-config.json")


@FORKS
def test_two_deletes_at_once_of_a_deferred_stage_out_run_it_once(
    tmp_path, site, fp, finisher, monkeypatch
):
    """podman's `rm` and the cleanup conmon starts may delete a container at once: both
    defer its stage-out, and one process of theirs runs it, once."""
    with (tmp_path / "scrun.toml").open("a") as config:
        config.write("step_grace = 0.2\n")
    spool, out = crashed_container(tmp_path, site, job_ended=False)
    steps = FakeSteps(fp, str(tmp_path / "bin"), 77, {0: "scrun"}, lingers=100)
    steps.job_cancelled = True
    runs = tmp_path / "stage-out-runs"
    original = PendingStageOut.run

    def run(pending: PendingStageOut, site_config: object) -> None:
        with runs.open("a") as record:
            record.write(f"{os.getpid()}\n")
        time.sleep(0.3)  # (the other finisher comes meanwhile, if there is one)
        original(pending, site_config)  # type: ignore[arg-type]

    monkeypatch.setattr(PendingStageOut, "run", run)
    assert main(["delete", "crashed"]) == 0
    assert main(["delete", "crashed"]) == 0
    wait_for("removal of the spool", lambda: not os.path.isdir(spool.path))
    time.sleep(0.5)
    assert out.exists() and len(runs.read_text().split()) == 1


@FORKS
def test_a_deferred_stage_out_gives_up_after_its_bound_and_leaves_the_spool(
    tmp_path, site, fp, finisher, monkeypatch
):
    """A step Slurm never stops listing: the deferred stage-out is not run, and the spool
    stays (with what stage-out needs) for a `scrun delete` by hand. The finisher says so in
    syslog (the engine has removed the --log file by then, and nobody reads its stderr)."""
    with (tmp_path / "scrun.toml").open("a") as config:
        config.write("step_grace = 0.2\n")
    syslog = tmp_path / "syslog"
    monkeypatch.setattr("scrunlib.log.SYSLOG_SOCKET", str(tmp_path))  # (one that exists)

    def to_syslog(program: str) -> Callable[[int, str], None]:
        def write(level: int, line: str) -> None:
            with syslog.open("a") as stream:
                stream.write(f"{program}: {level}: {line}\n")

        return write

    monkeypatch.setattr("scrunlib.log._to_syslog", to_syslog)
    spool, out = crashed_container(tmp_path, site, job_ended=False)
    steps = FakeSteps(fp, str(tmp_path / "bin"), 77, {0: "scrun"}, lingers=10**6)
    steps.job_cancelled = True
    assert main(["--log", str(tmp_path / "engine.log"), "delete", "crashed"]) == 0
    (tmp_path / "engine.log").unlink()  # (what the engine does once it has read it)
    time.sleep(2.0)  # past the finisher's bound (1 s)
    assert not out.exists()
    assert os.path.isdir(spool.path) and os.path.exists(spool.stage_file)
    assert syslog.read_text() == (
        "scrun: 2: stage-out of container crashed not run: its steps in job 77 still run; "
        "`scrun delete crashed` runs it once they have ended\n"
    )
    assert not (tmp_path / "engine.log").exists()


@FORKS
def test_two_deletes_at_once_of_a_dead_anchors_container_stage_out_once(
    tmp_path, site, steps, monkeypatch
):
    """podman's `rm` and the cleanup conmon starts delete a container whose anchor has
    ended at once (a SIGKILL before its step ran leaves its stage-out and job so): one of
    them stages out and ends the job, the other finds the spool gone."""
    spool, out = crashed_container(tmp_path, site, job_ended=False)
    runs = tmp_path / "stage-out-runs"
    original = PendingStageOut.run

    def run(pending: PendingStageOut, site_config: object) -> None:
        with runs.open("a") as record:
            record.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # (the other delete comes meanwhile)
        original(pending, site_config)  # type: ignore[arg-type]

    monkeypatch.setattr(PendingStageOut, "run", run)
    other = os.fork()
    if other == 0:
        os._exit(main(["delete", "crashed"]))
    assert main(["delete", "crashed"]) == 0
    assert os.waitstatus_to_exitcode(os.waitpid(other, 0)[1]) == 0
    assert out.exists() and len(runs.read_text().split()) == 1
    assert not os.path.isdir(spool.path)
