"""A container whose anchor died between stage-in and stage-out: `scrun delete` runs
scrun.lua's stage-out with the arguments the anchor would have passed."""

import json
import os

import pytest
from scrun_cli.main import main
from scrunlib.lua.records import StageContext
from scrunlib.spool import Spool
from scrunlib.stageout import PendingStageOut
from scrunlib.state import ContainerState, Status

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
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=unit\n")
    config = tmp_path / "scrun.toml"
    config.write_text(f'slurm_conf = "{etc / "slurm.conf"}"\n')
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(config))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("SCRUN_DEBUG", raising=False)
    return etc


def crashed_container(tmp_path, etc, result="slurm.SUCCESS"):
    """State of a container whose anchor is gone (pid 0) after stage-in, job already ended."""
    out = tmp_path / "stage-out-args"
    script = etc / "scrun.lua"
    script.write_text(f"OUT = {json.dumps(str(out))}\nRESULT = {result}\n{RECORDING_SCRIPT}")
    spool = Spool(str(tmp_path / "run" / "scrun"), "crashed")
    spool.create()
    ContainerState(
        "crashed", "/scratch/crashed", "/scratch/crashed/rootfs",
        status=Status.RUNNING, job_id=77, job_ended=True,
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


def test_delete_stages_out_for_a_dead_anchor(tmp_path, site, capsys):
    spool, out = crashed_container(tmp_path, site)
    assert main(["delete", "crashed"]) == 0
    assert out.read_text().split("|") == [
        "crashed", "/scratch/crashed", "/home/u/bundle", "/scratch/crashed/rootfs",
        "/home/u/bundle/rootfs", spool.dir_for_scripts, "/home/u/bundle/config.json",
        "77", "1000", "1001",
    ]  # fmt: skip
    assert not os.path.isdir(spool.path)
    assert capsys.readouterr().err == ""


def test_a_failed_stage_out_is_reported_and_the_delete_goes_on(tmp_path, site, capsys):
    spool, out = crashed_container(tmp_path, site, result="slurm.ERROR")
    assert main(["delete", "crashed"]) == 0
    assert out.exists()
    err = capsys.readouterr().err
    assert "stage-out of container crashed failed" in err and err.count("\n") == 1
    assert not os.path.isdir(spool.path)


def test_a_vanished_script_is_reported_and_the_delete_goes_on(tmp_path, site, capsys):
    spool, _ = crashed_container(tmp_path, site)
    (site / "scrun.lua").unlink()
    assert main(["delete", "crashed"]) == 0
    assert "scrun.lua is gone" in capsys.readouterr().err
    assert not os.path.isdir(spool.path)


def test_nothing_pending_means_no_lua(tmp_path, site):
    spool, out = crashed_container(tmp_path, site)
    PendingStageOut.clear(spool)
    PendingStageOut.clear(spool)  # idempotent
    assert PendingStageOut.load(spool) is None
    assert main(["delete", "crashed"]) == 0
    assert not out.exists()


def test_the_record_round_trips(tmp_path, site):
    spool, _ = crashed_container(tmp_path, site)
    pending = PendingStageOut.load(spool)
    assert pending is not None
    assert pending.context.job_env == ("SLURM_JOB_ID=77",)
    assert (pending.bundle, pending.root_path) == ("/scratch/crashed", "/scratch/crashed/rootfs")
