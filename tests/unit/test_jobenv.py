"""The job environment: SCRUN_* output variables and the SLURM_* variables of a job record."""

import os
from datetime import datetime
from typing import Any

import pytest
from scrunlib import bundle as bundles
from scrunlib import job_options, jobenv
from scrunlib.errors import SlurmError
from scrunlib.job_options import unknown_variables
from scrunlib.jobenv import container_job_env, output_variables, slurm_variables
from scrunlib.slurm_commands import parse_scontrol_record
from scrunlib.spool import Spool
from scrunlib.users import group_name, user_name

# --- output variables -------------------------------------------------------------------

CONFIG = {
    "ociVersion": "1.0.2",
    "root": {"path": "rootfs"},
    "process": {"args": ["true"]},
    "annotations": {"org.opencontainers.image.title": "alpine", "io.podman.x": ""},
}
BUNDLE = bundles.parse("/b", CONFIG)
SPOOL = Spool("/run/user/1000/scrun", "c1")
OUTPUT_ARGS: dict[str, Any] = {
    "submission_bundle": "/b",
    "pid_file": "/run/c1.pid",
    "log_file": "/tmp/log.json",
    "log_format": "json",
    "anchor_pid": 4242,
    "uid": 0,
    "gid": 0,
}


def test_output_variables():
    assert output_variables(BUNDLE, SPOOL, **OUTPUT_ARGS) == {
        "SCRUN_OCI_VERSION": "1.0.2",
        "SCRUN_CONTAINER_ID": "c1",
        "SCRUN_PID": "4242",
        "SCRUN_BUNDLE": "/b",
        "SCRUN_SUBMISSION_BUNDLE": "/b",
        "SCRUN_ANNOTATION_org.opencontainers.image.title": "alpine",
        "SCRUN_ANNOTATION_io.podman.x": "",
        "SCRUN_PID_FILE": "/run/c1.pid",
        "SCRUN_SOCKET": "/run/user/1000/scrun/c1/anchor.sock",
        "SCRUN_SPOOL_DIR": "/run/user/1000/scrun/c1/",
        "SCRUN_SUBMISSION_CONFIG_FILE": "/b/config.json",
        "SCRUN_USER": "root",
        "SCRUN_USER_ID": "0",
        "SCRUN_GROUP": "root",
        "SCRUN_GROUP_ID": "0",
        "SCRUN_ROOT": "/run/user/1000/scrun",
        "SCRUN_ROOTFS_PATH": "/b/rootfs",
        "SCRUN_SUBMISSION_ROOTFS_PATH": "/b/rootfs",
        "SCRUN_LOG_FILE": "/tmp/log.json",
        "SCRUN_LOG_FORMAT": "json",
    }


def test_output_variables_leave_out_what_upstream_leaves_out():
    nameless = 4_000_000  # no account has this uid
    assert user_name(nameless) == "" and group_name(65534) in ("nogroup", "nobody", "")
    odd = bundles.parse("/b", {**CONFIG, "annotations": {"a=b": "x", "ok": "1\0", "fine": "y"}})
    env = output_variables(
        odd,
        SPOOL,
        **{
            **OUTPUT_ARGS,
            "anchor_pid": 0,
            "pid_file": None,
            "submission_bundle": None,
            "uid": nameless,
            "gid": 65534,
            "log_file": None,
        },
    )
    assert env["SCRUN_PID_FILE"] == "" and env["SCRUN_SUBMISSION_BUNDLE"] == ""
    assert env["SCRUN_USER_ID"] == str(nameless)
    for name in ("SCRUN_PID", "SCRUN_USER", "SCRUN_GROUP", "SCRUN_GROUP_ID", "SCRUN_LOG_FILE",
                 "SCRUN_LOG_FORMAT", "SCRUN_ANNOTATION_a=b", "SCRUN_ANNOTATION_ok"):  # fmt: skip
        assert name not in env
    assert env["SCRUN_ANNOTATION_fine"] == "y"
    nobody = output_variables(BUNDLE, SPOOL, **{**OUTPUT_ARGS, "uid": 65534})
    assert "SCRUN_USER" not in nobody and "SCRUN_USER_ID" not in nobody


def test_annotations_too_big_for_an_environment_are_left_out():
    """A 10 MB annotation made every command of the job fail with "Argument list too long"
    (E2BIG): stage-in's first one ended create."""
    big = "x" * 200_000  # one string of 32 pages or more is refused by execve
    many = {f"m{number:02}": "y" * 100_000 for number in range(30)}  # 3 MB together
    odd = bundles.parse("/b", {**CONFIG, "annotations": {"big": big, **many, "small": "z"}})
    env = output_variables(odd, SPOOL, **OUTPUT_ARGS)
    assert "SCRUN_ANNOTATION_big" not in env and env["SCRUN_ANNOTATION_small"] == "z"
    kept = [name for name in env if name.startswith("SCRUN_ANNOTATION_m")]
    assert 0 < len(kept) < len(many)
    assert sum(len(f"{k}={v}") + 1 for k, v in env.items()) <= jobenv.ANNOTATIONS_ROOM + 10_000


def test_output_variable_names_are_known():
    env = output_variables(BUNDLE, SPOOL, **OUTPUT_ARGS)
    names = set(env) - set(job_options.OUTPUT_VARIABLES)
    assert all(name.startswith(job_options.ANNOTATION_PREFIX) for name in names)
    assert unknown_variables(dict.fromkeys(env, "")) == {}


def test_container_job_env_is_the_slurm_part_the_output_variables_and_the_container():
    slurm_part = {"SLURM_JOB_ID": "7", "SLURM_JOBID": "7"}
    old = container_job_env(
        slurm_part=slurm_part, bundle=BUNDLE, submission_bundle="/b", spool=SPOOL,
        version=(22, 5, 8), log_format="json",
    )  # fmt: skip
    assert old["SLURM_JOB_ID"] == "7" and old["SLURM_CONTAINER"] == "/b"
    assert old["SCRUN_PID"] == str(os.getpid()) and old["SCRUN_USER_ID"] == str(os.getuid())
    assert "SLURM_CONTAINER_ID" not in old and "SCRUN_LOG_FORMAT" not in old  # no log file
    new = container_job_env(
        slurm_part=slurm_part, bundle=BUNDLE, submission_bundle="/b", spool=SPOOL,
        version=(23, 2, 0),
    )  # fmt: skip
    assert new["SLURM_CONTAINER_ID"] == "c1"


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


def test_slurm_variables_one_node():
    env = slurm_variables(parse_scontrol_record(ONE_NODE), "linux", "login1")
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


def test_slurm_variables_three_nodes():
    env = slurm_variables(parse_scontrol_record(THREE_NODES), "linux", "login1")
    assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "node[1-3]"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "3"
    assert env["SLURM_NTASKS"] == "3" and env["SLURM_CPUS_PER_TASK"] == "4"
    assert env["SLURM_JOB_ACCOUNT"] == "physics" and env["SLURM_JOB_QOS"] == "high"
    assert env["SLURM_JOB_RESERVATION"] == "maint"
    assert env["SLURM_MEM_PER_CPU"] == "1024"
    assert env["SLURM_JOB_START_TIME"] == local_epoch(2024, 5, 1, 9, 0, 5)
    for absent in ("SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_END_TIME", "SLURM_MEM_PER_NODE"):
        assert absent not in env


def test_slurm_variables_leaves_out_unset_fields():
    env = slurm_variables(parse_scontrol_record(PENDING), "", "login1")
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


def test_slurm_variables_needs_a_job_id():
    with pytest.raises(SlurmError, match="no JobId"):
        slurm_variables({"JobName": "x"}, "c", "h")
