"""Slurm command lines, composed as argument lists (checked with pytest-subprocess)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_steps import FakeSteps
from scrunlib.errors import SlurmError
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm
from scrunlib.slurm_commands import (
    JOB_HOLDER,
    StepCommand,
    cancel_argv,
    exec_argv,
    job_exit_status,
    job_tag,
    kill_wait,
    parse_scontrol_record,
    remote_command_argv,
    salloc_argv,
    salloc_variables,
    step_argv,
    steps_argv,
    tagged_container,
    user_jobs,
)
from scrunlib.slurm_version import parse_version

V2205 = (22, 5, 8)
V2302 = (23, 2, 0)


def test_step_on_22_05_has_no_container_id():
    step = StepCommand(job_id=5, bundle="/b", args=["sh", "-c", "x y"], container_id="c1")
    argv = step_argv("/usr/bin/srun", step, V2205)
    assert "--container-id" not in " ".join(argv)
    assert argv[:3] == ["/usr/bin/srun", "--jobid", "5"]
    assert argv[argv.index("--container") + 1] == "/b"
    assert "--chdir=/" in argv  # srun's own cwd may not be on the node
    assert argv[argv.index("--") :] == ["--", "sh", "-c", "x y"]


def test_step_on_23_02_tags_the_container_and_pty():
    step = StepCommand(
        job_id=5, bundle="/b", args=["sh"], container_id="c1", pty=True, extra_args=["--label"]
    )
    argv = step_argv("srun", step, V2302)
    assert argv[argv.index("--container-id") + 1] == "c1"
    assert "--pty" in argv and "--label" in argv
    assert argv.index("--label") < argv.index("--")


def test_the_container_and_exec_steps_keep_srun_to_its_fatal_messages():
    """Two --quiet: srun's "task 0: Exited with exit code N" line is error level (one
    --quiet keeps errors); a Lua command's step keeps them (its output is scrun's own)."""
    step = step_argv(
        "srun", StepCommand(job_id=5, bundle="/b", args=["sh"], container_id="c"), V2302
    )
    assert step.count("--quiet") == 2 and step.index("--quiet") < step.index("--")
    exec_step = exec_argv("srun", 5, "n1", "crun exec x", pty=False)
    assert exec_step.count("--quiet") == 2 and exec_step.index("--quiet") < exec_step.index("--")
    assert remote_command_argv("srun", 5, "true").count("--quiet") == 1


def test_salloc_line():
    argv = salloc_argv("salloc", "scrun", "c1", ["--partition=second"], V2205)
    assert argv[0] == "salloc" and "--no-shell" not in argv  # salloc holds the job
    assert "--kill-command=TERM" in argv  # and lets it go once Slurm ended it
    assert "--job-name=scrun" in argv and "--comment=scrun:c1" in argv
    assert argv[argv.index("--") - 1] == "--partition=second"
    assert argv[argv.index("--") :] == ["--", "/bin/sh", "-c", JOB_HOLDER]
    assert "--container-id=c1" in salloc_argv("salloc", "scrun", "c1", [], V2302)


def test_remote_command_runs_the_script_unparsed():
    argv = remote_command_argv("srun", 9, "echo $HOME; rm -rf x")
    assert argv[-3:] == ["/bin/sh", "-c", "echo $HOME; rm -rf x"]


def test_remote_command_runs_in_the_nodes_root_dir():
    """scrun's cwd is the login host's (a clone under /tmp, a rootless shim's private /run):
    slurmstepd would print `couldn't chdir` into the command's output."""
    argv = remote_command_argv("srun", 9, "true")
    assert "--chdir=/" in argv[: argv.index("--")]


def test_cancel_lines():
    assert cancel_argv("scancel", 4) == ["scancel", "--quiet", "4"]
    # a step or a signal without --quiet: only scancel's message tells an ending job (below)
    assert cancel_argv("scancel", 4, step_id=2) == ["scancel", "4.2"]
    assert cancel_argv("scancel", 4, signal=10, step_id=2) == ["scancel", "--signal=10", "4.2"]


def test_kill_wait_is_read_from_scontrols_config():
    assert kill_wait("KillOnBadExit = 0\nKillWait                = 30 sec\n") == 30.0
    assert kill_wait("KillWait = 5 sec") == 5.0
    assert kill_wait("KillWait = soon\n") is None
    assert kill_wait("KillWait =\n") is None
    assert kill_wait("SlurmctldPort = 6817\n") is None


def test_parsers():
    assert parse_version("slurm 22.05.8\n") == V2205
    record = parse_scontrol_record("JobId=5 JobName=scrun JobState=RUNNING NodeList=vm")
    assert record["JobState"] == "RUNNING" and record["NodeList"] == "vm"


@pytest.fixture
def slurm(tmp_path):
    for name in ("srun", "salloc", "scancel", "scontrol", "squeue"):
        tool = tmp_path / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    return Slurm(SiteConfig(bin_dir=str(tmp_path)), "/etc/x/slurm.conf"), str(tmp_path)


FAKE_SALLOC = f"""#!{sys.executable}
# salloc as far as scrun relies on it: run the command after `--` with the job's id, and
# end the job with its exit status (recorded here: `exit N` or `signal N`)
import os, subprocess, sys
open(sys.argv[0] + ".args", "w").write(" ".join(sys.argv[1:]))
command = sys.argv[sys.argv.index("--") + 1 :]
job = {{"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]"}}
code = subprocess.run(command, env={{**os.environ, **job}}).returncode
status = f"signal {{-code}}" if code < 0 else f"exit {{code}}"
open(sys.argv[0] + ".status", "w").write(status)
"""


def test_salloc_holds_the_job_until_released_with_the_exit_code(fp, slurm):
    client, bindir = slurm
    (Path(bindir) / "salloc").write_text(FAKE_SALLOC)
    fp.register([f"{bindir}/srun", "--version"], stdout="slurm 22.05.8\n")
    fp.allow_unregistered(True)
    cases = ((0, "exit 0"), (3, "exit 3"), (137, "signal 9"), (143, "signal 15"), (255, "exit 255"))
    for exit_code, recorded in cases:
        allocation = client.allocate("scrun", "c1", ["--time=2"])
        assert (allocation.job_id, allocation.nodes) == (77, "n[1-2]")
        assert "--time=2" in (Path(bindir) / "salloc.args").read_text()
        assert allocation.held()
        assert allocation.release(exit_code, timeout=10)
        assert (Path(bindir) / "salloc.status").read_text() == recorded


def test_exit_status_for_the_holder():
    assert [job_exit_status(code) for code in (0, 3, 128, 130, 137, 192, 193)] == [
        "0", "3", "128", "-2", "-9", "-64", "193"
    ]  # fmt: skip


def test_refused_allocation_names_slurms_reason(fp, slurm):
    client, bindir = slurm
    (Path(bindir) / "salloc").write_text(
        "#!/bin/sh\necho 'salloc: error: invalid partition specified: nope' >&2\n"
        "echo 'salloc: error: Job submit/allocate failed: Invalid partition name specified' >&2\n"
        "exit 1\n"
    )
    fp.register([f"{bindir}/srun", "--version"], stdout="slurm 22.05.8\n")
    fp.allow_unregistered(True)
    with pytest.raises(SlurmError, match=r"allocation refused: .*Invalid partition"):
        client.allocate("scrun", "c1", ["--partition=nope"])


def test_a_user_without_association_is_told_so(fp, slurm):
    client, bindir = slurm
    (Path(bindir) / "salloc").write_text(
        "#!/bin/sh\necho 'salloc: error: Job submit/allocate failed: Invalid account or"
        " account/partition combination specified' >&2\nexit 1\n"
    )
    fp.register([f"{bindir}/srun", "--version"], stdout="slurm 22.05.8\n")
    fp.allow_unregistered(True)
    with pytest.raises(SlurmError) as refused:
        client.allocate("scrun", "c1", [])
    assert refused.value.message.startswith("allocation refused: Slurm's accounting has no")
    assert "association" in refused.value.message and "sacctmgr" in refused.value.message
    assert "Invalid account or account/partition combination" in refused.value.message


def test_cancel_tolerates_finished_jobs(fp, slurm):
    client, bindir = slurm
    fp.register(
        [f"{bindir}/scancel", "--quiet", "5"],
        returncode=1,
        stderr="scancel: error: Kill job error on job id 5: Job/step already completed\n",
    )
    client.cancel(5)
    fp.register(
        [f"{bindir}/scancel", "5.0"],
        returncode=1,
        stderr="scancel: error: Kill job error on job step id 5.0: Job/step already completing"
        " or completed\n",
    )
    client.cancel(5, step_id=0)
    # a step of a job someone else cancelled, while Slurm ends it (KillWait)
    fp.register(
        [f"{bindir}/scancel", "5.1"],
        returncode=1,
        stderr="scancel: error: Kill job error on job step id 5.1: Invalid job id specified\n",
    )
    client.cancel(5, step_id=1)
    fp.register(
        [f"{bindir}/scancel", "--quiet", "6"], returncode=1, stderr="scancel: error: boom\n"
    )
    with pytest.raises(SlurmError, match="boom"):
        client.cancel(6)


def test_a_signal_to_a_job_slurm_is_ending_is_no_error(fp, slurm):
    """A job cancelled from outside or at its time limit stays COMPLETING while Slurm kills
    its step (KillWait); `podman kill` or `rm -f` of its container then must not fail."""
    client, bindir = slurm
    fp.register(
        [f"{bindir}/scancel", "--signal=9", "5.0"],
        returncode=1,
        stderr="scancel: error: Kill job error on job step id 5.0: Invalid job id specified\n",
    )
    client.cancel(5, signal=9, step_id=0)
    fp.register([f"{bindir}/scancel", "--signal=9", "6.0"], returncode=1, stderr="")
    with pytest.raises(SlurmError, match="scancel 6 failed"):
        client.cancel(6, signal=9, step_id=0)


def test_a_signal_a_suspended_job_keeps_is_told_apart(fp, slurm):
    """Slurm keeps a signal from a step of a suspended job (SIGKILL excepted): cancel says
    so with False, for the caller to tell the user; other failures stay errors."""
    client, bindir = slurm
    fp.register(
        [f"{bindir}/scancel", "--signal=15", "5.0"],
        returncode=187,
        stderr="scancel: error: Kill job error on job step id 5: Job step not running\n",
    )
    assert client.cancel(5, signal=15, step_id=0) is False
    fp.register([f"{bindir}/scancel", "--signal=15", "5.0"])
    assert client.cancel(5, signal=15, step_id=0) is True


def test_step_ids_by_name(fp, slurm):
    client, bindir = slurm
    fp.register([f"{bindir}/squeue", fp.any()], stdout="9.0 other\n9.3 scrun-c1\n9.4 scrun-c1\n")
    assert client.step_ids(9, "scrun-c1") == [3, 4]


def test_version_is_cached_per_srun_binary(fp, slurm, tmp_path):
    client, bindir = slurm
    cache = str(tmp_path / "version-cache")
    fp.register([f"{bindir}/srun", "--version"], stdout="slurm 22.05.8\n")
    first = Slurm(client.site, client.slurm_conf, version_cache=cache)
    assert first.version() == V2205
    again = Slurm(client.site, client.slurm_conf, version_cache=cache)
    assert again.version() == V2205  # from the cache: a second srun call would fail in fp
    assert fp.call_count([f"{bindir}/srun", "--version"]) == 1
    (tmp_path / "srun").write_text("#!/bin/sh\n# upgraded\n")
    fp.register([f"{bindir}/srun", "--version"], stdout="slurm 23.02.1\n")
    assert Slurm(client.site, client.slurm_conf, version_cache=cache).version() == (23, 2, 1)


@pytest.fixture
def hung_slurm(tmp_path, monkeypatch):
    """Slurm commands that hang (a stuck slurmctld), with a half-second bound."""
    monkeypatch.setattr("scrunlib.slurm.COMMAND_TIMEOUT", 0.5)
    for name in ("srun", "salloc", "scancel", "scontrol", "squeue"):
        tool = tmp_path / name
        tool.write_text("#!/bin/sh\nexec sleep 30\n")
        tool.chmod(0o755)
    return Slurm(SiteConfig(bin_dir=str(tmp_path)), "/etc/x/slurm.conf")


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("scancel", lambda slurm: slurm.cancel(5)),
        ("scontrol", lambda slurm: slurm.job_record(5)),
        ("squeue", lambda slurm: slurm.step_ids(5, "scrun")),
        ("squeue", lambda slurm: slurm.cancel_tagged("c1")),
    ],
)
def test_a_hung_command_is_killed_and_reported(hung_slurm, name, call):
    started = time.monotonic()
    with pytest.raises(SlurmError, match=rf"^{name} did not finish in 0\.5 s and was killed$"):
        call(hung_slurm)
    assert time.monotonic() - started < 5  # killed, not waited for


def test_job_tag_round_trip():
    assert job_tag("c1") == "scrun:c1"
    assert tagged_container(job_tag("a:b")) == "a:b"
    assert tagged_container("someone else's comment") is None
    assert tagged_container("") is None


def test_ending_our_own_allocation_cancels_the_job(fp, slurm):
    client, bindir = slurm
    fp.register([f"{bindir}/scancel", "--quiet", "7"])
    client.end_container_job(7, existing_job=False, step_name="scrun")
    assert [call[0] for call in fp.calls] == [f"{bindir}/scancel"]


def test_ending_a_joined_job_cancels_only_our_steps(fp, slurm):
    client, bindir = slurm
    fp.register([f"{bindir}/squeue", fp.any()], stdout="9.0 other\n9.3 scrun-c1\n")
    fp.register([f"{bindir}/scancel", "9.3"])
    client.end_container_job(9, existing_job=True, step_name="scrun-c1")
    assert fp.call_count([f"{bindir}/scancel", "9.3"]) == 1
    assert fp.call_count([f"{bindir}/scancel", fp.any()]) == 1  # not the job, not step 0


def test_in_a_rootless_namespace_every_command_runs_as_the_real_user(fp, slurm, monkeypatch):
    """Inside rootless podman (uid 0 = user 1001) salloc, srun and scancel go through
    `unshare --map-user`: slurmctld refuses a request that names uid 0."""
    from scrunlib import userns

    monkeypatch.setattr(userns, "real_ids", lambda: (1001, 1002))
    monkeypatch.setattr(userns, "in_other_identity", lambda: True)
    client, bindir = slurm
    as_user = [
        fp.any(min=1, max=1),
        "--user",
        "--map-user=1001",
        "--map-group=1002",
        "--keep-caps",
        "--",
    ]
    fp.register([*as_user, f"{bindir}/srun", "--version"], stdout="slurm 22.05.8\n")
    fp.register([*as_user, f"{bindir}/scancel", "--quiet", "8"])
    fp.register([*as_user, f"{bindir}/srun", "--jobid", "8"])
    client.cancel(8)
    step = client.start([f"{bindir}/srun", "--jobid", "8"], env={})
    step.wait_ended()
    assert all(os.path.basename(call[0]) == "unshare" for call in fp.calls)
    # salloc is spawned without subprocess (scrunlib.processes): its command line is checked here
    spawned = []

    def refuse(argv, env, **fds):
        spawned.append(argv)
        raise PermissionError(13, "refused by the test")

    monkeypatch.setattr("scrunlib.slurm.spawn", refuse)
    with pytest.raises(SlurmError, match="cannot run"):
        client.allocate("scrun", "c1", [])
    (argv,) = spawned
    assert os.path.basename(argv[0]) == "unshare"
    assert argv[1:6] == ["--user", "--map-user=1001", "--map-group=1002", "--keep-caps", "--"]
    assert argv[6] == f"{bindir}/salloc"


# A record as Slurm 22.05 prints it (`scontrol -o show job`), with a job name, a comment, a
# reason and a working directory holding spaces (and `word=word`), and the double space
# before Power= that scontrol writes.
SPACED = (
    "JobId=8 JobName=train gpt UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901752 Nice=0 Account=(null) QOS=(null) JobState=PENDING "
    "Reason=launch failed requeued held Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 "
    "Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED Partition=second "
    "AllocNode:Sid=localhost:24963 ReqNodeList=(null) NodeList=n[1-2] NumNodes=2 NumCPUs=2 "
    "NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=2,billing=2 Socks/Node=* "
    "Features=(null) Command=/bin/sh -c x=1 WorkDir=/home/a b/run Comment=first run: lr=3e-4 "
    " Power= \n"
)


def test_scontrol_records_keep_values_with_spaces_whole():
    record = parse_scontrol_record(SPACED)
    assert record["JobName"] == "train gpt"
    assert record["Reason"] == "launch failed requeued held"
    assert record["Command"] == "/bin/sh -c x=1"
    assert record["WorkDir"] == "/home/a b/run"
    assert record["Comment"] == "first run: lr=3e-4"
    assert record["TRES"] == "cpu=2,node=2,billing=2"  # `=` in a value that is not free text
    # and the fields after them are where they belong
    assert (record["Partition"], record["NodeList"], record["NumNodes"]) == (
        "second",
        "n[1-2]",
        "2",
    )
    assert record["Power"] == ""
    assert record["AllocNode:Sid"] == "localhost:24963"


def test_a_key_newer_slurm_adds_still_ends_the_value_before_it():
    record = parse_scontrol_record("JobId=8 Partition=debug NewField=x y JobState=RUNNING")
    assert record == {"JobId": "8", "Partition": "debug", "NewField": "x y", "JobState": "RUNNING"}


def test_only_the_first_record_is_read():
    assert parse_scontrol_record("\nJobId=1 JobName=a\nJobId=2 JobName=b\n") == {
        "JobId": "1",
        "JobName": "a",
    }


def test_the_job_env_takes_the_whole_job_name():
    from scrunlib.jobenv import slurm_variables

    env = slurm_variables(parse_scontrol_record(SPACED), "unit", "login1")
    assert env["SLURM_JOB_NAME"] == "train gpt"
    assert env["SLURM_JOB_PARTITION"] == "second"


def test_step_and_tag_lookups_take_names_with_spaces(fp, slurm):
    client, bindir = slurm
    fp.register(
        [f"{bindir}/squeue", "-h", "-s", "-j", "9", "-o", "%i %j"],
        stdout="9.0 train gpt\n9.1 train\n9.2 train gpt x\n",
    )
    assert client.step_ids(9, "train gpt") == [0]


def test_end_steps_cancels_and_waits_until_slurm_lists_none(fp, slurm):
    """A step whose tasks take a while to die stays listed; end_steps cancels it once and
    returns only when squeue no longer lists it. Steps of other names are left alone."""
    client, bindir = slurm
    steps = FakeSteps(fp, bindir, 9, {0: "scrun", 2: "scrun-exec", 3: "lua-command"}, lingers=2)
    assert client.end_steps(9, ("scrun", "scrun-exec"), timeout=10)
    assert steps.events == [
        "squeue: 9.0 scrun\n9.2 scrun-exec\n9.3 lua-command",
        "scancel 9.0",
        "scancel 9.2",
        "squeue: 9.0 scrun\n9.2 scrun-exec\n9.3 lua-command",
        "squeue: 9.0 scrun\n9.2 scrun-exec\n9.3 lua-command",
        "squeue: 9.3 lua-command",
    ]


def test_end_steps_says_when_a_step_outlives_its_bound(fp, slurm):
    client, bindir = slurm
    FakeSteps(fp, bindir, 9, {0: "scrun"}, lingers=999)
    started = time.monotonic()
    assert not client.end_steps(9, ("scrun",), timeout=0.5)
    assert time.monotonic() - started < 5


def test_step_lists_of_an_ended_job_are_empty_and_other_failures_errors(fp, slurm):
    client, bindir = slurm
    listing = steps_argv(f"{bindir}/squeue", 9, "%i %j")
    fp.register(listing, returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n")
    assert client.end_steps(9, ("scrun",), timeout=10)  # Slurm 22.05's answer for it
    fp.register(listing, returncode=1, stderr="squeue: error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmError, match=r"cannot list the steps of job 9: .*Unable to contact"):
        client.step_ids(9, "scrun")


def test_a_slurm_26_05_job_record_keeps_its_comment_whole():
    """26.05 added SubmitLine (free text, after Command) and ContainerType (after Comment):
    the comment, scrun's tag, ends where ContainerType begins."""
    line = (
        "JobId=1174 JobName=scrun JobState=COMPLETED Exclusive=NO Command=/bin/sh "
        "SubmitLine=/usr/bin/salloc --job-name=scrun --comment=scrun:c1 -- /bin/sh -c echo x=1 "
        "WorkDir=/work Comment=scrun:c1 ContainerType=(null) Container=(null) ContainerID=c1"
    )
    record = parse_scontrol_record(line)
    assert record["Comment"] == "scrun:c1"
    assert tagged_container(record["Comment"]) == "c1"
    assert record["Command"] == "/bin/sh"
    assert record["SubmitLine"].endswith("-c echo x=1")
    assert (record["ContainerType"], record["ContainerID"]) == ("(null)", "c1")


def test_the_users_jobs_are_listed_with_state_and_reason_whole(fp, slurm):
    slurm, bin_dir = slurm
    listing = "71 PENDING Priority\n72 RUNNING None\n73 PENDING ReqNodeNotAvail, Reserved\n"
    listing += "9_1 PENDING Priority\n"  # an array's task: not a container's job
    fp.register([f"{bin_dir}/squeue", "--me", "-h", "-o", "%i %T %r"], stdout=listing)
    assert user_jobs(slurm.user_jobs()) == {
        71: ("PENDING", "Priority"),
        72: ("RUNNING", ""),
        73: ("PENDING", "ReqNodeNotAvail, Reserved"),
    }
    fp.register([f"{bin_dir}/squeue", fp.any()], returncode=1, stderr="squeue: error: down\n")
    with pytest.raises(SlurmError, match="cannot list the user's jobs: squeue: error: down"):
        slurm.user_jobs()


def holder_answer(env: dict[str, str]) -> tuple[str, bytes]:
    """JOB_HOLDER run by /bin/sh in `env` (as salloc runs it), its answer read as the
    anchor reads it; then told the container's exit status."""
    from scrunlib.slurm import _read_answer

    answer_read, answer_write = os.pipe()
    holder = subprocess.Popen(
        ["/bin/sh", "-c", JOB_HOLDER], env=env, stdin=subprocess.PIPE, stdout=answer_write
    )
    os.close(answer_write)
    try:
        return _read_answer(answer_read)
    finally:
        os.close(answer_read)
        holder.communicate(b"0\n", timeout=10)


def test_the_job_holder_answers_its_job_then_its_environment():
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NAME": "a\nb"}
    line, environment = holder_answer(env)
    assert line == "5 n[1-2]"
    entries = environment.split(b"\0")
    assert entries[-1] == b"" and b"SLURM_JOB_NAME=a\nb" in entries[:-1]


@pytest.mark.parametrize(
    ("written", "answer"),
    [
        (b"5 n1\n\n", ("5 n1", b"")),  # env printed nothing
        (b"5 n1\n", ("5 n1", b"")),  # the holder ended before its environment
        (b"", ("", b"")),  # salloc ended without a job
    ],
)
def test_an_answer_without_an_environment_still_names_the_job(written, answer):
    from scrunlib.slurm import _read_answer

    answer_read, answer_write = os.pipe()
    os.write(answer_write, written)
    os.close(answer_write)
    try:
        assert _read_answer(answer_read) == answer
    finally:
        os.close(answer_read)


def test_salloc_variables_are_its_slurm_ones_but_slurm_conf():
    environment = b"SLURM_JOB_ID=7\0SLURM_TASKS_PER_NODE=2(x2)\0SLURM_CONF=/etc/slurm.conf\0"
    environment += b"HOME=/root\0SLURM_JOB_NAME=a=b\nc\0"
    assert salloc_variables(environment) == {
        "SLURM_JOB_ID": "7",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_NAME": "a=b\nc",
    }


@pytest.mark.parametrize("environment", [b"", b"HOME=/root\0", b"SLURM_JOB_ID=\0"])
def test_salloc_variables_without_a_job_id_are_none(environment):
    """The holder could not say (env missing, cut short): the record is read instead."""
    assert salloc_variables(environment) is None
