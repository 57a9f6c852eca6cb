"""The job environment of one container: what scrun.lua's hooks get as `job_env`, what
`slurm.allocator_command`/`remote_command` and the container's srun run with.

It is the job's SLURM_* variables (those salloc gave the command that holds the job, as
upstream's scrun takes Slurm's job output variables; else from the job's `scontrol show job`
record), the SCRUN_* output variables, and SLURM_CONTAINER(_ID). The anchor, scrun-stage
and scrun-lua-check all build it here, so an admin trying a script by hand sees exactly
what the anchor passes. Standard library only: the anchor builds it on every `create` (not
even `re`).
"""

from __future__ import annotations

import os
import time

from scrunlib.bundle import Bundle
from scrunlib.errors import SlurmError
from scrunlib.job_options import ANNOTATION_PREFIX
from scrunlib.pidns import own_pid
from scrunlib.slurm_version import SlurmVersion, supports_container_id
from scrunlib.spool import Spool
from scrunlib.userns import real_ids
from scrunlib.users import group_name, user_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# An id that is not mapped in the user namespace shows as the kernel's overflow id.
NOBODY_ID = 65534


def container_job_env(
    *,
    slurm_part: Mapping[str, str],
    bundle: Bundle,
    submission_bundle: str | None,
    spool: Spool,
    version: SlurmVersion | None,
    pid_file: str | None = None,
    log_file: str | None = None,
    log_format: str | None = None,
) -> dict[str, str]:
    """The whole job env: `slurm_part` (the job's SLURM_* variables, see slurm_variables)
    plus the SCRUN_* output variables, for a container whose anchor is this process
    (scrun-stage and scrun-lua-check stand in for one). `version` None: unknown, so no
    SLURM_CONTAINER_ID."""
    env = dict(slurm_part)
    env.update(
        output_variables(
            bundle,
            spool,
            submission_bundle=submission_bundle,
            pid_file=pid_file,
            log_file=log_file,
            log_format=log_format,
        )
    )
    env["SLURM_CONTAINER"] = bundle.path
    if version is not None and supports_container_id(version):
        env["SLURM_CONTAINER_ID"] = spool.container_id
    return env


def output_variables(
    bundle: Bundle,
    spool: Spool,
    *,
    submission_bundle: str | None,
    pid_file: str | None = None,
    log_file: str | None = None,
    log_format: str | None = None,
    anchor_pid: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
) -> dict[str, str]:
    """The SCRUN_* "script" variables for the job env: what scrun.lua, the allocator and
    remote commands and the container's srun see. The anchor is this process and its user
    and group this process's real ones (scrunlib.userns), unless given. Unset strings are
    exported empty, except those upstream leaves out (pid 0, unknown or nobody user/group,
    no --log; the log format only with a log file). Annotations whose key or value cannot
    be part of an environment variable are skipped."""
    anchor_pid = own_pid() if anchor_pid is None else anchor_pid
    real_uid, real_gid = real_ids()
    uid = real_uid if uid is None else uid
    gid = real_gid if gid is None else gid
    env = {
        "SCRUN_OCI_VERSION": bundle.oci_version,
        "SCRUN_CONTAINER_ID": spool.container_id,
        "SCRUN_BUNDLE": bundle.path,
        "SCRUN_SUBMISSION_BUNDLE": submission_bundle or "",
        "SCRUN_PID_FILE": pid_file or "",
        "SCRUN_SOCKET": spool.socket,
        "SCRUN_SPOOL_DIR": spool.dir_for_scripts,
        "SCRUN_SUBMISSION_CONFIG_FILE": bundle.config_file,
        "SCRUN_ROOT": spool.root,
        "SCRUN_ROOTFS_PATH": bundle.rootfs,
        "SCRUN_SUBMISSION_ROOTFS_PATH": bundle.rootfs,
    }
    if anchor_pid:
        env["SCRUN_PID"] = str(anchor_pid)
    env.update(_identity("SCRUN_USER", user_name(uid), uid))
    env.update(_identity("SCRUN_GROUP", group_name(gid), gid))
    if log_file is not None:
        env["SCRUN_LOG_FILE"] = log_file
        if log_format is not None:
            env["SCRUN_LOG_FORMAT"] = log_format
    room = ANNOTATIONS_ROOM
    for key, value in bundle.annotations.items():
        if "=" in key or "\0" in key or "\0" in value:
            continue
        size = len(f"{ANNOTATION_PREFIX}{key}={value}".encode()) + 1
        if size <= room and size <= _MAX_ARG_STRLEN:
            env[ANNOTATION_PREFIX + key] = value
            room -= size
    return env


# Linux refuses to run a program (E2BIG, "Argument list too long") with one environment
# string of 32 pages or more, or with an argv and environment above a quarter of the stack
# limit (2 MiB by default): the allocator's and remote commands, salloc and srun get these
# variables. An annotation past either is left out of them, as one with a NUL is.
_MAX_ARG_STRLEN = 32 * 4096 - 1
ANNOTATIONS_ROOM = 1 << 20


def _identity(prefix: str, name: str, number: int) -> dict[str, str]:
    """NAME and NAME_ID for a user or group, leaving out what is unknown or nobody."""
    if number == NOBODY_ID or name == "nobody":
        return {}
    env = {prefix + "_ID": str(number)}
    if name:
        env[prefix] = name
    return env


# `scontrol show job` prints these for "not set".
_UNSET = frozenset({"", "(null)", "N/A", "None", "Unknown"})
_RECORD_STRINGS = (
    ("JobName", ("SLURM_JOB_NAME",)),
    ("NodeList", ("SLURM_JOB_NODELIST", "SLURM_NODELIST")),
    ("Partition", ("SLURM_JOB_PARTITION",)),
    ("Account", ("SLURM_JOB_ACCOUNT",)),
    ("QOS", ("SLURM_JOB_QOS",)),
    ("Reservation", ("SLURM_JOB_RESERVATION",)),
)
_RECORD_TIMES = (("StartTime", "SLURM_JOB_START_TIME"), ("EndTime", "SLURM_JOB_END_TIME"))
_RECORD_MEMORY = (("MinMemoryNode", "SLURM_MEM_PER_NODE"), ("MinMemoryCPU", "SLURM_MEM_PER_CPU"))
_MEGABYTES = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def slurm_variables(
    record: Mapping[str, str], cluster_name: str, submit_host: str | None = None
) -> dict[str, str]:
    """salloc's output variables (SLURM_JOB_ID, SLURM_JOB_NODELIST, …) from a
    `scontrol -o show job` record, for a job scrun allocated with `salloc`
    (which prints them nowhere). A field the record leaves unset gives no variable.
    `submit_host` defaults to this host.

    SLURM_CPUS_PER_TASK is set only above 1: the record shows 1 whether or not it was asked
    for, and srun ≥ 23.11 reads it back as an option. SLURM_JOB_CPUS_PER_NODE is known only
    for one-node jobs; the one-line record does not break the CPUs down by node.
    """
    job_id = _field(record, "JobId")
    if job_id is None:
        raise SlurmError("the job record from scontrol has no JobId")
    if submit_host is None:
        submit_host = os.uname().nodename
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_SUBMIT_HOST": submit_host}
    if cluster_name:
        env["SLURM_CLUSTER_NAME"] = cluster_name
    for key, names in _RECORD_STRINGS:
        value = _field(record, key)
        if value is not None:
            env.update(dict.fromkeys(names, value))
    nodes = _count(record, "NumNodes")
    if nodes:
        env["SLURM_JOB_NUM_NODES"] = env["SLURM_NNODES"] = str(nodes)
    cpus = _count(record, "NumCPUs")
    if nodes == 1 and cpus:
        env["SLURM_JOB_CPUS_PER_NODE"] = str(cpus)
    tasks = _count(record, "NumTasks")
    if tasks:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(tasks)
    cpus_per_task = _count(record, "CPUs/Task")
    if cpus_per_task and cpus_per_task > 1:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    for key, name in _RECORD_MEMORY:
        megabytes = _megabytes(_field(record, key))
        if megabytes:
            env[name] = str(megabytes)
    for key, name in _RECORD_TIMES:
        epoch = _epoch(_field(record, key))
        if epoch is not None:
            env[name] = str(epoch)
    return env


def _field(record: Mapping[str, str], key: str) -> str | None:
    value = record.get(key)
    return None if value is None or value in _UNSET else value


def _count(record: Mapping[str, str], key: str) -> int | None:
    """A count such as NumNodes; pending jobs show a range (`1-2`), of which the low end."""
    value = _field(record, key)
    low = value.partition("-")[0] if value else ""
    return int(low) if low.isascii() and low.isdigit() else None


def _megabytes(value: str | None) -> int | None:
    """scontrol's memory (`500M`, `2G`, `1024`) in megabytes, as salloc exports it."""
    value = value or ""
    number, unit = (value[:-1], value[-1]) if value[-1:] in _MEGABYTES else (value, "M")
    if not (number.isascii() and number.isdigit()):
        return None
    return int(int(number) * _MEGABYTES[unit])


def _epoch(value: str | None) -> int | None:
    """scontrol's local `2024-05-01T10:00:00` → seconds since the epoch. time.mktime, not
    datetime or strptime: each create would import them (their cost: lint_tree/hotpath.py)."""
    date, _, clock = (value or "").partition("T")
    try:
        year, month, day = (int(number) for number in date.split("-"))
        hour, minute, second = (int(number) for number in clock.split(":"))
    except ValueError:  # "Unknown", "None", or not a time at all
        return None
    return int(time.mktime((year, month, day, hour, minute, second, 0, 0, -1)))
