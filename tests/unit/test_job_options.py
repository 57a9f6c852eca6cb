"""SCRUN_* variables → Slurm options (no cluster needed)."""

import re

import pytest
from scrunlib import job_options
from scrunlib.errors import InvalidInput
from scrunlib.job_options import (
    VARIABLES,
    JobRequest,
    Target,
    job_request,
    merge_environment,
    unknown_variables,
)
from scrunlib.value_kinds import KINDS

V2205 = (22, 5, 8)
V2302 = (23, 2, 0)
V2311 = (23, 11, 4)
V2405 = (24, 5, 1)

# Upstream scrun's job variables, in the order it reads them.
UPSTREAM_ORDER = [
    "ACCOUNT", "ACCTG_FREQ", "BURST_BUFFER", "CLUSTER_CONSTRAINT", "CLUSTERS", "CONSTRAINT",
    "CORE_SPEC", "CPU_BIND", "CPU_FREQ_REQ", "CPUS_PER_GPU", "CPUS_PER_TASK", "DELAY_BOOT",
    "DEPENDENCY", "DISTRIBUTION", "EPILOG", "EXACT", "EXCLUSIVE", "GPU_BIND", "GPU_FREQ", "GPUS",
    "GPUS_PER_NODE", "GPUS_PER_SOCKET", "GPUS_PER_TASK", "GRES_FLAGS", "GRES", "HINT", "JOB_NAME",
    "JOB_NODELIST", "JOB_NUM_NODES", "LABELIO", "MEM_BIND", "MEM_PER_CPU", "MEM_PER_GPU",
    "MEM_PER_NODE", "MPI_TYPE", "NCORES_PER_SOCKET", "NETWORK", "NSOCKETS_PER_NODE", "NTASKS",
    "NTASKS_PER_CORE", "NTASKS_PER_GPU", "NTASKS_PER_NODE", "NTASKS_PER_TRES", "OPEN_MODE",
    "OVERCOMMIT", "OVERLAP", "PARTITION", "POWER", "PROFILE", "PROLOG", "QOS", "REMOTE_CWD",
    "REQ_SWITCH", "RESERVATION", "SIGNAL", "SLURMD_DEBUG", "SPREAD_JOB", "TASK_EPILOG",
    "TASK_PROLOG", "THREAD_SPEC", "THREADS_PER_CORE", "THREADS", "TIMELIMIT", "TRES_BIND",
    "TRES_PER_TASK", "UNBUFFEREDIO", "USE_MIN_NODES", "WAIT4SWITCH", "WCKEY", "WORKING_DIR",
]  # fmt: skip

# Upstream aborts `create` for these (srun-only or no salloc option); here they go to the step.
UPSTREAM_FATAL = {
    "SCRUN_CPU_BIND", "SCRUN_EPILOG", "SCRUN_EXACT", "SCRUN_LABELIO", "SCRUN_MPI_TYPE",
    "SCRUN_OPEN_MODE", "SCRUN_OVERLAP", "SCRUN_PROLOG", "SCRUN_SLURMD_DEBUG",
    "SCRUN_TASK_EPILOG", "SCRUN_TASK_PROLOG", "SCRUN_THREADS", "SCRUN_UNBUFFEREDIO",
}  # fmt: skip

# Accepted by Slurm 22.05.8 on this machine: `salloc --OPTION[=value] --version` (and srun)
# prints the version instead of "unrecognized option". Exact names matter: getopt also takes
# unambiguous abbreviations (`salloc --threads=2` is silently --threads-per-core).
SALLOC_2205 = {
    "--account", "--acctg-freq", "--bb", "--cluster-constraint", "--clusters", "--constraint",
    "--core-spec", "--cpu-freq", "--cpus-per-gpu", "--cpus-per-task", "--delay-boot",
    "--dependency", "--distribution", "--exclusive", "--gpu-bind", "--gpu-freq", "--gpus",
    "--gpus-per-node", "--gpus-per-socket", "--gpus-per-task", "--gres-flags", "--gres", "--hint",
    "--job-name", "--nodelist", "--nodes", "--mem-bind", "--mem-per-cpu", "--mem-per-gpu", "--mem",
    "--cores-per-socket", "--network", "--sockets-per-node", "--ntasks", "--ntasks-per-core",
    "--ntasks-per-gpu", "--ntasks-per-node", "--ntasks-per-tres", "--overcommit", "--partition",
    "--power", "--profile", "--qos", "--chdir", "--switches", "--reservation", "--signal",
    "--spread-job", "--thread-spec", "--threads-per-core", "--time", "--use-min-nodes", "--wckey",
}  # fmt: skip
SRUN_2205 = {
    "--cpu-bind", "--epilog", "--exact", "--label", "--mpi", "--overlap", "--prolog",
    "--slurmd-debug", "--task-epilog", "--task-prolog", "--threads", "--unbuffered",
    "--open-mode", "--job-name",
}  # fmt: skip


def request(version=V2205, **env):
    return job_request(env, version)


def variable(name):
    return next(v for v in VARIABLES if v.name == name)


# --- the table --------------------------------------------------------------------------


def test_table_has_every_upstream_variable_in_upstream_order():
    assert [v.name for v in VARIABLES] == ["SCRUN_" + name for name in UPSTREAM_ORDER]


def test_srun_only_variables_go_to_the_step_and_the_rest_to_the_allocation():
    for v in VARIABLES:
        if v.name in UPSTREAM_FATAL:
            assert v.target == Target.STEP, v.name
        elif v.name == "SCRUN_JOB_NAME":
            assert v.target == Target.JOB_NAME
        else:
            assert v.target == Target.ALLOCATION, v.name


def test_every_option_exists_in_22_05_or_says_since_when():
    for v in VARIABLES:
        known = SRUN_2205 if v.target == Target.STEP else SALLOC_2205
        assert (v.option in known) != bool(v.since), v.name


def test_kinds_listed_for_the_docs_are_exactly_the_kinds_in_use():
    assert set(KINDS) == {v.kind for v in VARIABLES}
    assert len(KINDS) == len(set(KINDS))


# --- values -----------------------------------------------------------------------------

VALID = [
    ("SCRUN_ACCOUNT", "physics", "--account=physics"),
    ("SCRUN_ACCTG_FREQ", "30", "--acctg-freq=30"),
    ("SCRUN_ACCTG_FREQ", "task=30,energy=0", "--acctg-freq=task=30,energy=0"),
    ("SCRUN_BURST_BUFFER", "capacity=1G access=striped", "--bb=capacity=1G access=striped"),
    ("SCRUN_CLUSTERS", "a,b", "--clusters=a,b"),
    ("SCRUN_CONSTRAINT", "intel&(ib|eth)", "--constraint=intel&(ib|eth)"),
    ("SCRUN_CORE_SPEC", "0", "--core-spec=0"),
    ("SCRUN_CPUS_PER_TASK", "4", "--cpus-per-task=4"),
    ("SCRUN_CPUS_PER_TASK", "04", "--cpus-per-task=4"),
    ("SCRUN_DELAY_BOOT", "10", "--delay-boot=10"),
    ("SCRUN_DEPENDENCY", "afterok:12:13,singleton", "--dependency=afterok:12:13,singleton"),
    ("SCRUN_EXCLUSIVE", "", "--exclusive"),
    ("SCRUN_EXCLUSIVE", "user", "--exclusive=user"),
    ("SCRUN_EXCLUSIVE", "MCS", "--exclusive=mcs"),
    ("SCRUN_GPUS", "2", "--gpus=2"),
    ("SCRUN_GPUS_PER_NODE", "a100:2,v100:1", "--gpus-per-node=a100:2,v100:1"),
    ("SCRUN_GRES", "gpu:a100:2", "--gres=gpu:a100:2"),
    ("SCRUN_HINT", "nomultithread", "--hint=nomultithread"),
    ("SCRUN_JOB_NODELIST", "node[1-3],gpu5", "--nodelist=node[1-3],gpu5"),
    ("SCRUN_JOB_NUM_NODES", "2", "--nodes=2"),
    ("SCRUN_JOB_NUM_NODES", "2-4", "--nodes=2-4"),
    ("SCRUN_MEM_PER_NODE", "0", "--mem=0"),
    ("SCRUN_MEM_PER_NODE", "4G", "--mem=4G"),
    ("SCRUN_MEM_PER_CPU", "512", "--mem-per-cpu=512"),
    ("SCRUN_MEM_PER_GPU", "1t", "--mem-per-gpu=1t"),
    ("SCRUN_PARTITION", "second", "--partition=second"),
    ("SCRUN_PARTITION", "debug,second", "--partition=debug,second"),
    ("SCRUN_POWER", "level", "--power=level"),
    ("SCRUN_PROFILE", "Energy,task", "--profile=energy,task"),
    ("SCRUN_PROFILE", "none", "--profile=none"),
    ("SCRUN_SIGNAL", "USR1", "--signal=USR1"),
    ("SCRUN_SIGNAL", "R:SIGUSR2@120", "--signal=R:SIGUSR2@120"),
    ("SCRUN_SIGNAL", "10@0", "--signal=10@0"),
    ("SCRUN_SIGNAL", "r:term", "--signal=r:term"),
    ("SCRUN_THREAD_SPEC", "1", "--thread-spec=1"),
    ("SCRUN_TIMELIMIT", "2", "--time=2"),
    ("SCRUN_TIMELIMIT", "1:30", "--time=1:30"),
    ("SCRUN_TIMELIMIT", "01:02:03", "--time=01:02:03"),
    ("SCRUN_TIMELIMIT", "1-2", "--time=1-2"),
    ("SCRUN_TIMELIMIT", "1-2:30", "--time=1-2:30"),
    ("SCRUN_TIMELIMIT", "1-2:30:00", "--time=1-2:30:00"),
    ("SCRUN_TIMELIMIT", "INFINITE", "--time=INFINITE"),
    ("SCRUN_TIMELIMIT", "unlimited", "--time=unlimited"),
    ("SCRUN_TIMELIMIT", "-1", "--time=-1"),
    ("SCRUN_REMOTE_CWD", "/home/alice/run 1", "--chdir=/home/alice/run 1"),
    ("SCRUN_WCKEY", "proj-7", "--wckey=proj-7"),
    ("SCRUN_CPU_BIND", "cores", "--cpu-bind=cores"),
    ("SCRUN_MPI_TYPE", "pmix", "--mpi=pmix"),
    ("SCRUN_OPEN_MODE", "Append", "--open-mode=append"),
    ("SCRUN_PROLOG", "/opt/site/prolog.sh", "--prolog=/opt/site/prolog.sh"),
    ("SCRUN_SLURMD_DEBUG", "debug2", "--slurmd-debug=debug2"),
    ("SCRUN_SLURMD_DEBUG", "3", "--slurmd-debug=3"),
    ("SCRUN_THREADS", "8", "--threads=8"),
]


@pytest.mark.parametrize(("name", "value", "arg"), VALID)
def test_valid_values_become_one_argument(name, value, arg):
    result = request(**{name: value})
    args = result.step_args if variable(name).target == Target.STEP else result.allocation_args
    assert args == (arg,)


INVALID = [
    ("SCRUN_ACCOUNT", "", "must not be empty"),
    ("SCRUN_ACCOUNT", "a b", "must not contain spaces"),
    ("SCRUN_ACCOUNT", "phys\tics", "control characters"),
    ("SCRUN_ACCTG_FREQ", "often", "type=seconds"),
    ("SCRUN_ACCTG_FREQ", "cpu=30", "type=seconds"),
    ("SCRUN_BURST_BUFFER", " ", "must not be empty"),
    ("SCRUN_CONSTRAINT", "a\nb", "control characters"),
    ("SCRUN_CORE_SPEC", "-1", "integer ≥ 0"),
    ("SCRUN_CPUS_PER_TASK", "0", "integer ≥ 1"),
    ("SCRUN_CPUS_PER_TASK", "+3", "integer ≥ 1"),
    ("SCRUN_CPUS_PER_TASK", "2.5", "integer ≥ 1"),
    ("SCRUN_CPUS_PER_TASK", "four", "integer ≥ 1"),
    ("SCRUN_CPUS_PER_TASK", "٣", "integer ≥ 1"),  # a digit, but not an ASCII one
    ("SCRUN_CPUS_PER_TASK", "2147483648", "at most"),
    ("SCRUN_DELAY_BOOT", "soon", "not a Slurm time"),
    ("SCRUN_EXCLUSIVE", "yes", "must be empty, user, mcs or topo"),
    ("SCRUN_GPUS", "two", "GPU count"),
    ("SCRUN_GPUS", "a100:", "GPU count"),
    ("SCRUN_GPUS_PER_NODE", "2,", "GPU count"),
    ("SCRUN_HINT", "fast", "must be compute_bound"),
    ("SCRUN_JOB_NAME", "", "must not be empty"),
    ("SCRUN_JOB_NAME", "a\x1bb", "control characters"),
    ("SCRUN_JOB_NUM_NODES", "0", "at least one"),
    ("SCRUN_JOB_NUM_NODES", "3-2", "maximum below its minimum"),
    ("SCRUN_JOB_NUM_NODES", "1-", "min or min-max"),
    ("SCRUN_JOB_NUM_NODES", "1k", "min or min-max"),
    ("SCRUN_MEM_PER_NODE", "1.5G", "not a size"),
    ("SCRUN_MEM_PER_NODE", "4GB", "not a size"),
    ("SCRUN_MEM_PER_NODE", "-1", "not a size"),
    ("SCRUN_MEM_PER_CPU", "lots", "not a size"),
    ("SCRUN_OPEN_MODE", "overwrite", "must be append or truncate"),
    ("SCRUN_PARTITION", "debug,,second", "empty item"),
    ("SCRUN_PARTITION", ",", "empty item"),
    ("SCRUN_PROFILE", "cpu", "must be all, none"),
    ("SCRUN_PROFILE", "task,", "must be all, none"),
    ("SCRUN_REMOTE_CWD", "relative/dir", "absolute path"),
    ("SCRUN_WORKING_DIR", "", "must not be empty"),
    ("SCRUN_SIGNAL", "B:USR1", "no batch shell"),
    ("SCRUN_SIGNAL", "RB:USR1@10", "no batch shell"),
    ("SCRUN_SIGNAL", "X:USR1", "unknown prefix"),
    ("SCRUN_SIGNAL", "USR3", "unknown signal"),
    ("SCRUN_SIGNAL", "0", "does not exist"),
    ("SCRUN_SIGNAL", "99", "does not exist"),
    ("SCRUN_SIGNAL", "USR1@", "[R:]signal[@seconds]"),
    ("SCRUN_SIGNAL", "USR1@-5", "[R:]signal[@seconds]"),
    ("SCRUN_SIGNAL", "USR1@70000", "more than 65535"),
    ("SCRUN_SLURMD_DEBUG", "loud", "Slurm log level"),
    ("SCRUN_SLURMD_DEBUG", "10", "Slurm log level"),
    ("SCRUN_THREADS", "0", "integer ≥ 1"),
    ("SCRUN_TIMELIMIT", "soon", "not a Slurm time"),
    ("SCRUN_TIMELIMIT", "", "not a Slurm time"),
    ("SCRUN_TIMELIMIT", "1:2:3:4", "not a Slurm time"),
    ("SCRUN_TIMELIMIT", "+5", "not a Slurm time"),
    ("SCRUN_TIMELIMIT", "-5", "not a Slurm time"),
    ("SCRUN_TIMELIMIT", "1h", "not a Slurm time"),
    ("SCRUN_EXACT", "maybe", "not a flag value"),
    ("SCRUN_EXACT", "-1", "not a flag value"),
    ("SCRUN_EXACT", " yes", "not a flag value"),
]


@pytest.mark.parametrize(("name", "value", "why"), INVALID)
def test_invalid_values_are_rejected_on_one_line_naming_variable_value_and_reason(name, value, why):
    with pytest.raises(InvalidInput) as caught:
        request(**{name: value})
    message = caught.value.message
    assert message.startswith(f"invalid {name}={value!r}: ")
    assert why in message
    assert "\n" not in message
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("value", "is_set"),
    [
        ("", True),
        ("yes", True),
        ("YES", True),
        ("true", True),
        ("True", True),
        ("1", True),
        ("7", True),
        ("no", False),
        ("NO", False),
        ("false", False),
        ("0", False),
        ("00", False),
    ],
)
def test_flags(value, is_set):
    assert request(SCRUN_OVERCOMMIT=value).allocation_args == (("--overcommit",) if is_set else ())
    assert request(SCRUN_LABELIO=value).step_args == (("--label",) if is_set else ())


# --- composition and precedence ---------------------------------------------------------


def test_nothing_set_gives_a_plain_scrun_job():
    assert request() == JobRequest("scrun", (), (), None)


def test_options_follow_table_order_and_split_between_allocation_and_step():
    result = request(
        SCRUN_TIMELIMIT="2",
        SCRUN_UNBUFFEREDIO="yes",
        SCRUN_PARTITION="second",
        SCRUN_LABELIO="",
        SCRUN_ACCOUNT="physics",
        SCRUN_CPU_BIND="none",
    )
    assert result.allocation_args == ("--account=physics", "--partition=second", "--time=2")
    assert result.step_args == ("--cpu-bind=none", "--label", "--unbuffered")


def test_job_name():
    assert request(SCRUN_JOB_NAME="train gpt").job_name == "train gpt"
    assert request(SCRUN_JOB_NAME="x").allocation_args == ()


def test_unrelated_variables_are_ignored():
    assert request(HOME="/root", SLURM_CONF="/etc/slurm.conf", SCRUN_DEBUG="debug") == request()


@pytest.mark.parametrize(
    "env",
    [
        {"SCRUN_REMOTE_CWD": "/a", "SCRUN_WORKING_DIR": "/b"},
        {"SCRUN_WORKING_DIR": "/b", "SCRUN_REMOTE_CWD": "/a"},
    ],
)
def test_working_dir_wins_over_remote_cwd(env):
    assert job_request(env, V2205).allocation_args == ("--chdir=/b",)


def test_remote_cwd_alone():
    assert request(SCRUN_REMOTE_CWD="/a").allocation_args == ("--chdir=/a",)


def test_switch_count_and_wait_make_one_option():
    assert request(SCRUN_REQ_SWITCH="2").allocation_args == ("--switches=2",)
    both = request(SCRUN_WAIT4SWITCH="1-0", SCRUN_REQ_SWITCH="2")
    assert both.allocation_args == ("--switches=2@1-0",)


def test_switch_wait_alone_is_an_error():
    with pytest.raises(InvalidInput, match="SCRUN_WAIT4SWITCH='5' needs SCRUN_REQ_SWITCH"):
        request(SCRUN_WAIT4SWITCH="5")
    with pytest.raises(InvalidInput, match="invalid SCRUN_WAIT4SWITCH='soon'"):
        request(SCRUN_REQ_SWITCH="2", SCRUN_WAIT4SWITCH="soon")


def test_merge_environment_container_wins_and_later_entries_win():
    caller = {"SCRUN_PARTITION": "debug", "HOME": "/home/a", "SCRUN_TIMELIMIT": "5"}
    merged = merge_environment(
        caller, ["SCRUN_PARTITION=second", "EMPTY=", "EQ=a=b", "SCRUN_PARTITION=third"]
    )
    assert merged == {
        "SCRUN_PARTITION": "third",
        "HOME": "/home/a",
        "SCRUN_TIMELIMIT": "5",
        "EMPTY": "",
        "EQ": "a=b",
    }
    assert caller["SCRUN_PARTITION"] == "debug"  # not modified
    assert job_request(merged, V2205).allocation_args == ("--partition=third", "--time=5")


@pytest.mark.parametrize("entry", ["NOEQUALS", "", "=value"])
def test_merge_environment_rejects_entries_without_a_name(entry):
    with pytest.raises(InvalidInput, match=r"process\.env entry"):
        merge_environment({}, ["A=1", entry])


# --- Slurm versions ---------------------------------------------------------------------


def test_tres_per_task_needs_23_02():
    with pytest.raises(InvalidInput) as caught:
        request(V2205, SCRUN_TRES_PER_TASK="cpu=2")
    assert caught.value.message == "SCRUN_TRES_PER_TASK needs Slurm ≥ 23.02 (found 22.05.8)"
    assert request(V2302, SCRUN_TRES_PER_TASK="cpu=2").allocation_args == ("--tres-per-task=cpu=2",)


def test_tres_bind_needs_23_11():
    with pytest.raises(InvalidInput, match=r"needs Slurm ≥ 23\.11 \(found 23\.02\)"):
        request(V2302, SCRUN_TRES_BIND="gres/gpu:closest")
    assert request(V2311, SCRUN_TRES_BIND="gres/gpu:closest").allocation_args == (
        "--tres-bind=gres/gpu:closest",
    )


def test_power_is_gone_in_24_05():
    assert request(V2311, SCRUN_POWER="level").allocation_args == ("--power=level",)
    with pytest.raises(InvalidInput) as caught:
        request(V2405, SCRUN_POWER="level")
    assert caught.value.message.startswith(
        "SCRUN_POWER needs Slurm < 24.05 (found 24.05.1): --power was removed"
    )


def test_exclusive_topo_needs_24_05():
    with pytest.raises(InvalidInput, match=r"SCRUN_EXCLUSIVE='topo' needs Slurm ≥ 24\.05"):
        request(V2311, SCRUN_EXCLUSIVE="topo")
    assert request(V2405, SCRUN_EXCLUSIVE="topo").allocation_args == ("--exclusive=topo",)
    assert request(V2205, SCRUN_EXCLUSIVE="user").allocation_args == ("--exclusive=user",)


def test_a_bad_value_is_reported_before_a_missing_version():
    with pytest.raises(InvalidInput, match="invalid SCRUN_TRES_PER_TASK=''"):
        request(V2205, SCRUN_TRES_PER_TASK="")


# --- existing job -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "job_id"), [("", None), ("123", 123), ("007", 7)])
def test_slurm_job_id(text, job_id):
    assert request(SLURM_JOB_ID=text).existing_job_id == job_id


@pytest.mark.parametrize("text", ["abc", "-1", "0", "12 ", " 12", "12_3", "12+0", "4294967296"])
def test_bad_slurm_job_id(text):
    with pytest.raises(InvalidInput, match=re.escape(f"invalid SLURM_JOB_ID={text!r}")):
        request(SLURM_JOB_ID=text)


def test_existing_job_keeps_step_options_and_ignores_allocation_ones():
    result = request(
        SLURM_JOB_ID="88",
        SCRUN_PARTITION="second",
        SCRUN_TIMELIMIT="5",
        SCRUN_LABELIO="yes",
        SCRUN_JOB_NAME="mine",
    )
    assert result == JobRequest(
        "mine", (), ("--label",), 88, ("SCRUN_PARTITION", "SCRUN_TIMELIMIT")
    )


def test_existing_job_still_checks_allocation_values():
    with pytest.raises(InvalidInput, match="SCRUN_TIMELIMIT"):
        request(SLURM_JOB_ID="88", SCRUN_TIMELIMIT="soon")


# --- unknown variables ------------------------------------------------------------------


def test_unknown_variables_get_suggestions():
    env = {
        "SCRUN_PARTITON": "x",
        "SCRUN_TIME_LIMIT": "5",
        "SCRUN_WHATEVER": "1",
        "SCRUN_PARTITION": "ok",
        "SCRUN_DEBUG": "debug",
        "SCRUN_FILE_DEBUG": "info",
        "SCRUN_SITE_CONFIG": "/etc/scrun.toml",
        "SCRUN_BUNDLE": "/b",
        "SCRUN_ANNOTATION_org.example.key": "v",
        "SLURM_PARTITON": "not ours",
    }
    assert unknown_variables(env) == {
        "SCRUN_PARTITON": ("SCRUN_PARTITION",),
        "SCRUN_TIME_LIMIT": ("SCRUN_TIMELIMIT",),
        "SCRUN_WHATEVER": (),
    }


@pytest.mark.parametrize(
    ("value", "expected"), [(None, True), ("1", True), ("yes", True), ("0", False), ("off", False)]
)
def test_pending_notices_are_on_unless_turned_off(value, expected):
    env = {} if value is None else {"SCRUN_PENDING_NOTICES": value}
    assert job_options.pending_notices(env) is expected
    assert "SCRUN_PENDING_NOTICES" not in job_options.unknown_variables(env)


def test_a_bad_pending_notices_value_is_one_line():
    with pytest.raises(InvalidInput, match=r"SCRUN_PENDING_NOTICES='maybe': give 1 or 0"):
        job_options.pending_notices({"SCRUN_PENDING_NOTICES": "maybe"})
