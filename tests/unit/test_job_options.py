"""SCRUN_* variables → Slurm options; the job and output environments (no cluster needed)."""

import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from scrunlib import job_options
from scrunlib.errors import InvalidInput, SlurmError
from scrunlib.job_options import (
    KINDS,
    VARIABLES,
    JobRequest,
    Target,
    job_environment,
    job_request,
    markdown_table,
    merge_environment,
    output_variables,
    unknown_variables,
)
from scrunlib.slurm import parse_scontrol_record

V2205 = (22, 5, 8)
V2302 = (23, 2, 0)
V2311 = (23, 11, 4)
V2405 = (24, 5, 1)
REPO = Path(__file__).resolve().parents[2]

# scrun-env.md §2, upstream's order.
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
            assert v.target is Target.STEP, v.name
        elif v.name == "SCRUN_JOB_NAME":
            assert v.target is Target.JOB_NAME
        else:
            assert v.target is Target.ALLOCATION, v.name


def test_every_option_exists_in_22_05_or_says_since_when():
    for v in VARIABLES:
        known = SRUN_2205 if v.target is Target.STEP else SALLOC_2205
        assert (v.option in known) != bool(v.since), v.name


def test_kinds_listed_for_the_docs_are_exactly_the_kinds_in_use():
    assert set(KINDS) == {v.kind for v in VARIABLES}
    assert len(KINDS) == len(set(KINDS))


def test_docs_are_generated_from_the_table():
    doc = (REPO / "docs" / "scrun-variables.md").read_text()
    assert doc == markdown_table(), "run: python -m scrunlib.job_options > docs/scrun-variables.md"


def test_module_entry_prints_the_docs_and_imports_only_the_standard_library():
    code = (
        "import runpy, sys; runpy.run_module('scrunlib.job_options', run_name='__main__');"
        "heavy = {'plumbum', 'loguru', 'lupa'} & set(sys.modules); assert not heavy, heavy"
    )
    source = {**os.environ, "PYTHONPATH": str(REPO / "shared")}  # this tree, not the venv's copy
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=source
    )
    assert out.stdout == markdown_table()


def test_every_variable_is_a_row_of_the_docs():
    doc = markdown_table()
    for v in VARIABLES:
        assert f"| `{v.name}` | `{v.option}` | {v.kind.name} |" in doc


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
    args = result.step_args if variable(name).target is Target.STEP else result.allocation_args
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


def test_version_text():
    assert job_options.version_text((23, 2, 0)) == "23.02"
    assert job_options.version_text((22, 5, 8)) == "22.05.8"


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


# --- output variables -------------------------------------------------------------------

OUTPUT_ARGS = {
    "oci_version": "1.0.2",
    "container_id": "c1",
    "anchor_pid": 4242,
    "bundle": "/b",
    "submission_bundle": "/b",
    "annotations": {"org.opencontainers.image.title": "alpine", "io.podman.x": ""},
    "pid_file": "/run/c1.pid",
    "socket": "/run/user/1000/scrun/c1/anchor.sock",
    "spool_dir": "/run/user/1000/scrun/c1",
    "config_file": "/b/config.json",
    "user": "alice",
    "user_id": 1000,
    "group": "alice",
    "group_id": 1000,
    "root": "/run/user/1000/scrun",
    "rootfs_path": "/b/rootfs",
    "log_file": "/tmp/log.json",
    "log_format": "json",
}


def test_output_variables():
    assert output_variables(**OUTPUT_ARGS) == {
        "SCRUN_OCI_VERSION": "1.0.2",
        "SCRUN_CONTAINER_ID": "c1",
        "SCRUN_PID": "4242",
        "SCRUN_BUNDLE": "/b",
        "SCRUN_SUBMISSION_BUNDLE": "/b",
        "SCRUN_ANNOTATION_org.opencontainers.image.title": "alpine",
        "SCRUN_ANNOTATION_io.podman.x": "",
        "SCRUN_PID_FILE": "/run/c1.pid",
        "SCRUN_SOCKET": "/run/user/1000/scrun/c1/anchor.sock",
        "SCRUN_SPOOL_DIR": "/run/user/1000/scrun/c1",
        "SCRUN_SUBMISSION_CONFIG_FILE": "/b/config.json",
        "SCRUN_USER": "alice",
        "SCRUN_USER_ID": "1000",
        "SCRUN_GROUP": "alice",
        "SCRUN_GROUP_ID": "1000",
        "SCRUN_ROOT": "/run/user/1000/scrun",
        "SCRUN_ROOTFS_PATH": "/b/rootfs",
        "SCRUN_SUBMISSION_ROOTFS_PATH": "/b/rootfs",
        "SCRUN_LOG_FILE": "/tmp/log.json",
        "SCRUN_LOG_FORMAT": "json",
    }


def test_output_variables_leave_out_what_upstream_leaves_out():
    env = output_variables(
        **{
            **OUTPUT_ARGS,
            "anchor_pid": 0,
            "pid_file": None,
            "submission_bundle": "",
            "user": None,
            "user_id": 1000,
            "group": "nogroup",
            "group_id": 65534,
            "log_file": None,
            "log_format": None,
            "annotations": {"a=b": "x", "ok": "1\0", "fine": "y"},
        }
    )
    assert env["SCRUN_PID_FILE"] == "" and env["SCRUN_SUBMISSION_BUNDLE"] == ""
    assert env["SCRUN_USER_ID"] == "1000"
    for name in ("SCRUN_PID", "SCRUN_USER", "SCRUN_GROUP", "SCRUN_GROUP_ID", "SCRUN_LOG_FILE",
                 "SCRUN_LOG_FORMAT", "SCRUN_ANNOTATION_a=b", "SCRUN_ANNOTATION_ok"):  # fmt: skip
        assert name not in env
    assert env["SCRUN_ANNOTATION_fine"] == "y"
    nobody = output_variables(**{**OUTPUT_ARGS, "user": "nobody", "user_id": 99})
    assert "SCRUN_USER" not in nobody and "SCRUN_USER_ID" not in nobody


def test_output_variable_names_are_known():
    names = set(output_variables(**OUTPUT_ARGS)) - set(job_options.OUTPUT_VARIABLES)
    assert all(name.startswith(job_options.ANNOTATION_PREFIX) for name in names)
    assert unknown_variables(dict.fromkeys(output_variables(**OUTPUT_ARGS), "")) == {}


# --- job environment from `scontrol -o show job` ----------------------------------------

# Slurm 22.05 `scontrol -o show job` lines for a job from `salloc --no-shell`.
ONE_NODE = (
    "JobId=42 JobName=scrun UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A "
    "Priority=4294901757 Nice=0 Account=(null) QOS=normal JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:00:03 "
    "TimeLimit=00:02:00 TimeMin=N/A SubmitTime=2024-05-01T10:00:00 "
    "EligibleTime=2024-05-01T10:00:00 AccrueTime=Unknown StartTime=2024-05-01T10:00:01 "
    "EndTime=2024-05-01T10:02:01 Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2024-05-01T10:00:01 Scheduler=Main Partition=debug AllocNode:Sid=login1:4242 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=node1 BatchHost=node1 NumNodes=1 NumCPUs=2 "
    "NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=500M,node=1,billing=2 "
    "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=500M "
    "MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 "
    "Licenses=(null) Network=(null) Command=(null) WorkDir=/home/alice Comment=scrun:c1 Power="
)
THREE_NODES = (
    "JobId=77 JobName=train UserId=bob(1001) GroupId=ml(2000) MCS_label=N/A Priority=1 Nice=0 "
    "Account=physics QOS=high JobState=RUNNING Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:10:00 TimeLimit=UNLIMITED "
    "TimeMin=N/A SubmitTime=2024-05-01T09:00:00 EligibleTime=2024-05-01T09:00:00 "
    "AccrueTime=2024-05-01T09:00:00 StartTime=2024-05-01T09:00:05 EndTime=Unknown Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-05-01T09:00:05 Scheduler=Backfill "
    "Partition=gpu AllocNode:Sid=login1:77 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=node[1-3] BatchHost=node1 NumNodes=3 NumCPUs=12 NumTasks=3 CPUs/Task=4 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=12,mem=12G,node=3,billing=12 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=4 MinMemoryCPU=1G MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 Reservation=maint OverSubscribe=OK Contiguous=0 "
    "Licenses=(null) Network=(null) Command=(null) WorkDir=/home/bob Comment=scrun:c2 Power="
)
PENDING = (
    "JobId=90 JobName=scrun Account=(null) QOS=normal JobState=PENDING Reason=Resources "
    "TimeLimit=00:05:00 StartTime=Unknown EndTime=Unknown Partition=debug NodeList=(null) "
    "NumNodes=1-2 NumCPUs=1 NumTasks=N/A CPUs/Task=N/A MinMemoryNode=0"
)


def local_epoch(*fields):
    return str(int(datetime(*fields).timestamp()))


def test_job_environment_one_node():
    env = job_environment(parse_scontrol_record(ONE_NODE), "linux", "login1")
    assert env == {
        "SLURM_JOB_ID": "42",
        "SLURM_JOBID": "42",
        "SLURM_JOB_NAME": "scrun",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_CPUS_PER_NODE": "2",
        "SLURM_NTASKS": "1",
        "SLURM_NPROCS": "1",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_QOS": "normal",
        "SLURM_MEM_PER_NODE": "500",
        "SLURM_CLUSTER_NAME": "linux",
        "SLURM_SUBMIT_HOST": "login1",
        "SLURM_JOB_START_TIME": local_epoch(2024, 5, 1, 10, 0, 1),
        "SLURM_JOB_END_TIME": local_epoch(2024, 5, 1, 10, 2, 1),
    }


def test_job_environment_three_nodes():
    env = job_environment(parse_scontrol_record(THREE_NODES), "linux", "login1")
    assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "node[1-3]"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "3"
    assert env["SLURM_NTASKS"] == "3" and env["SLURM_CPUS_PER_TASK"] == "4"
    assert env["SLURM_JOB_ACCOUNT"] == "physics" and env["SLURM_JOB_QOS"] == "high"
    assert env["SLURM_JOB_RESERVATION"] == "maint"
    assert env["SLURM_MEM_PER_CPU"] == "1024"
    assert env["SLURM_JOB_START_TIME"] == local_epoch(2024, 5, 1, 9, 0, 5)
    for absent in ("SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_END_TIME", "SLURM_MEM_PER_NODE"):
        assert absent not in env


def test_job_environment_leaves_out_unset_fields():
    env = job_environment(parse_scontrol_record(PENDING), "", "login1")
    assert env == {
        "SLURM_JOB_ID": "90",
        "SLURM_JOBID": "90",
        "SLURM_JOB_NAME": "scrun",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_QOS": "normal",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_CPUS_PER_NODE": "1",
        "SLURM_SUBMIT_HOST": "login1",
    }


def test_job_environment_needs_a_job_id():
    with pytest.raises(SlurmError, match="no JobId"):
        job_environment({"JobName": "x"}, "c", "h")
