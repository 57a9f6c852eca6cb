"""scrun-stage's command line, without a cluster: --job-id and allocator-only scripts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrun_stage.main import main
from scrunlib import log

ALLOCATOR_ONLY = Path(__file__).resolve().parents[1] / "lua" / "allocator_only.lua"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No site file, no SLURM_CONF or job from the caller; logging restored afterwards."""
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(tmp_path / "no-site.toml"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield
    log.configure(log.LogSettings())


@pytest.fixture
def slurm_conf(tmp_path: Path) -> Path:
    path = tmp_path / "slurm.conf"
    path.write_text("ClusterName=unit\n")
    return path


def args(command: str, bundle: Path, slurm_conf: Path, *extra: str) -> list[str]:
    return [command, "--bundle", str(bundle), "-f", str(slurm_conf), "--id", "stage1",
            "--root", str(slurm_conf.parent / "root"), *extra]  # fmt: skip


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "exit status" in out and "3  scrun.lua could not be loaded" in out
    for command in ("in", "out", "both"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("scrun-stage ")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus"], "required: COMMAND"),
        (["in", "--bundle", "/b", "--bogus"], "unrecognized arguments: --bogus"),
        ([], ""),
        # 0 meant the site's lua_timeout, and below 0 every hook ran out of time at once
        (["in", "--bundle", "/b", "--timeout", "0"], "--timeout"),
        (["in", "--bundle", "/b", "--timeout", "-1"], "--timeout"),
        (["both", "--bundle", "/b", "--timeout", "inf"], "--timeout"),
        # argparse would take an option's start for the option, in each subcommand too
        (["both", "--bundle", "/b", "--time", "30"], "unrecognized arguments: --time"),
        (["cache", "list", "--scr", "/s"], "unrecognized arguments: --scr"),
    ],
)
def test_usage_error_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("scrun-stage") and needle in err


def test_dry_stage_in_with_existing_job(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path
) -> None:
    status = main(
        args("in", bundle, slurm_conf, "--job-id", "123", "--script", str(ALLOCATOR_ONLY))
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "== slurm_scrun_stage_in: ok (status 0" in out
    assert "$ echo staging $SCRUN_CONTAINER_ID in job $SLURM_JOB_ID" in out
    assert "| staging stage1 in job 123" in out
    assert "info: allocator said: staging stage1 in job 123" in out
    assert "load log    info: allocator_only loaded" in out
    assert "config.json diff\n  (unchanged)" in out


def test_json_report(capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path) -> None:
    argv = args("both", bundle, slurm_conf, "--job-id", "7", "--script", str(ALLOCATOR_ONLY),
                "--format", "json")  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["job_id"] == 7 and report["exit_status"] == 0
    stage_in, stage_out = report["stages"]
    assert stage_in["hook"] == "slurm_scrun_stage_in" and stage_in["ok"]
    assert stage_in["commands"][0]["output"] == "staging stage1 in job 7\n"
    assert stage_in["bundle"] == stage_in["bundle_before"] == str(bundle)
    assert stage_out["logs"] == [{"level": "info", "message": f"stage_out {bundle} 7"}]


def test_both_runs_before_start_between_when_the_script_has_it(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, tmp_path: Path
) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text(
        "function scrun_before_start(id) slurm.log_info('starting %s', id) return 0 end\n"
        + ALLOCATOR_ONLY.read_text()
    )
    argv = args("both", bundle, slurm_conf, "--job-id", "7", "--script", str(script),
                "--format", "json")  # fmt: skip
    assert main(argv) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert [stage["hook"] for stage in stages] == [
        "slurm_scrun_stage_in", "scrun_before_start", "slurm_scrun_stage_out"]  # fmt: skip
    assert stages[1]["logs"] == [{"level": "info", "message": "starting stage1"}]


def test_job_id_from_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bundle: Path,
    slurm_conf: Path,
) -> None:  # fmt: skip
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    assert main(args("in", bundle, slurm_conf, "--script", str(ALLOCATOR_ONLY))) == 0
    assert "job         99" in capsys.readouterr().out


def test_no_job_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path
) -> None:
    assert main(args("in", bundle, slurm_conf, "--script", str(ALLOCATOR_ONLY))) == 2
    assert "no job" in capsys.readouterr().err


def test_out_needs_the_staged_bundle(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path
) -> None:
    argv = args("out", bundle, slurm_conf, "--job-id", "1", "--script", str(ALLOCATOR_ONLY))
    assert main(argv) == 2
    assert "--staged-bundle" in capsys.readouterr().err


def test_out_with_staged_bundle(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, tmp_path: Path
) -> None:
    argv = args("out", bundle, slurm_conf, "--job-id", "1", "--script", str(ALLOCATOR_ONLY),
                "--staged-bundle", str(tmp_path / "staged"), "--staged-root", "/r")  # fmt: skip
    assert main(argv) == 0
    assert f"info: stage_out {tmp_path / 'staged'} 1" in capsys.readouterr().out


def test_bad_bundle_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], slurm_conf: Path, tmp_path: Path
) -> None:
    argv = args("in", tmp_path / "missing", slurm_conf, "--job-id", "1")
    assert main(argv) == 2
    assert "missing" in capsys.readouterr().err


def test_script_load_error_exits_3(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.lua"
    broken.write_text("function (\n")
    assert main(args("in", bundle, slurm_conf, "--job-id", "1", "--script", str(broken))) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"scrun-stage: error: unable to load {broken}: {broken}:1:")


def test_default_script_is_beside_slurm_conf(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path
) -> None:
    assert main(args("in", bundle, slurm_conf, "--job-id", "1")) == 3
    expected = slurm_conf.parent / "scrun.lua"
    assert f"unable to load {expected}: the file does not exist" in capsys.readouterr().err


def test_stage_failure_exits_1(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, tmp_path: Path
) -> None:
    failing = tmp_path / "failing.lua"
    failing.write_text(
        "function slurm_scrun_stage_in() slurm.log_error('no scratch space') return -1 end\n"
        "function slurm_scrun_stage_out() return 0 end\n"
    )
    assert main(args("in", bundle, slurm_conf, "--job-id", "1", "--script", str(failing))) == 1
    out = capsys.readouterr().out
    assert "FAILED (status -1" in out and "no scratch space" in out


# -- the job env: built as the anchor builds it ------------------------------------------

RECORD = (
    "JobId=123 JobName=scrun-stage UserId=root(0) GroupId=root(0) JobState=RUNNING "
    "Partition=debug NodeList=node[1-2] BatchHost=node1 NumNodes=2 NumCPUs=4 NumTasks=2 "
    "CPUs/Task=1 TimeLimit=UNLIMITED Comment=scrun:stage1"
)


def json_report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main([*argv, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert isinstance(report, dict)
    return report


def env_of(report: dict[str, object]) -> dict[str, str]:
    entries = report["job_env"]
    assert isinstance(entries, list)
    return dict(entry.split("=", 1) for entry in entries)


def test_job_env_without_a_job_record(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """No cluster: the job's id and cluster stand in for the record; the SCRUN_* output
    variables are the anchor's; nothing of the caller's environment leaks in."""
    monkeypatch.setenv("LEAKED_FROM_SHELL", "1")
    root = slurm_conf.parent / "root"
    argv = args("in", bundle, slurm_conf, "--job-id", "123", "--script", str(ALLOCATOR_ONLY))
    report = json_report(capsys, argv)
    env = env_of(report)
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "123"
    assert env["SLURM_CLUSTER_NAME"] == "unit"
    assert env["SCRUN_CONTAINER_ID"] == "stage1"
    assert env["SCRUN_SPOOL_DIR"] == f"{root}/stage1/"
    assert env["SCRUN_SOCKET"].startswith(f"{root}/stage1/")
    assert env["SCRUN_ROOT"] == str(root)
    assert env["SCRUN_BUNDLE"] == env["SCRUN_SUBMISSION_BUNDLE"] == str(bundle)
    assert env["SCRUN_ROOTFS_PATH"] == str(bundle / "rootfs")
    assert env["SCRUN_PID_FILE"] == ""
    assert env["SLURM_CONTAINER"] == str(bundle)
    assert "LEAKED_FROM_SHELL" not in env and "PATH" not in env
    assert str(report["job_env_source"]).startswith("no job record")


def test_job_env_text_report_lists_it(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path
) -> None:
    argv = args("in", bundle, slurm_conf, "--job-id", "123", "--script", str(ALLOCATOR_ONLY))
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\njob env     " in out and "from no job record" in out
    assert "\n  SCRUN_CONTAINER_ID=stage1\n" in out


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site whose scontrol prints RECORD and whose srun is version 23.02."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho '{RECORD}'\n")
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'slurm 23.02.7'\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    site = tmp_path / "site.toml"
    site.write_text(f'bin_dir = "{bin_dir}"\n')
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(site))
    return bin_dir


def test_a_job_the_cluster_does_not_know_is_refused(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, fake_slurm: Path
) -> None:
    """scontrol answers that the job does not exist: one error line, no hook runs (an
    unreachable cluster, above, still runs them with the job's id alone)."""
    scontrol = fake_slurm / "scontrol"
    answer = "slurm_load_jobs error: Invalid job id specified"
    scontrol.write_text(f"#!/bin/sh\necho '{answer}' >&2\nexit 1\n")
    argv = args("in", bundle, slurm_conf, "--job-id", "123", "--script", str(ALLOCATOR_ONLY))
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "scrun-stage: error: job 123 does not exist: give a job of yours that runs, or --allocate"
    ]
    assert "staging" not in captured.out


def test_job_env_from_the_job_record(
    capsys: pytest.CaptureFixture[str], bundle: Path, slurm_conf: Path, fake_slurm: Path
) -> None:
    """With a job record, the SLURM_* part is jobenv.slurm_variables's (the anchor's)."""
    import os

    from scrunlib.jobenv import slurm_variables
    from scrunlib.slurm_commands import parse_scontrol_record

    argv = args("in", bundle, slurm_conf, "--job-id", "123", "--script", str(ALLOCATOR_ONLY))
    report = json_report(capsys, argv)
    env = env_of(report)
    expected = slurm_variables(parse_scontrol_record(RECORD), "unit", os.uname().nodename)
    assert expected["SLURM_JOB_NODELIST"] == "node[1-2]"  # the record really was read
    assert {name: env.get(name) for name in expected} == expected
    assert env["SLURM_CONTAINER_ID"] == "stage1"  # srun 23.02 knows container ids
    assert env["SCRUN_CONTAINER_ID"] == "stage1"
    assert report["job_env_source"] == "scontrol show job 123"
    stage_in = report["stages"]
    assert isinstance(stage_in, list)
    assert stage_in[0]["commands"][0]["output"] == "staging stage1 in job 123\n"
