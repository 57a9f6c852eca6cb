"""The job environment of one container: what scrun.lua's hooks get as `job_env`, what
`slurm.allocator_command`/`remote_command` and the container's srun run with.

It is the job's SLURM_* variables (from its `scontrol show job` record), the SCRUN_* output
variables, and SLURM_CONTAINER(_ID). The anchor and scrun-stage both build it here, so an
admin trying a script by hand sees exactly what the anchor passes.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Mapping

from scrunlib import job_options
from scrunlib.bundle import Bundle
from scrunlib.slurm import SlurmVersion, cluster_name, supports_container_id
from scrunlib.spool import Spool
from scrunlib.userns import real_ids


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""


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
    """`slurm_part` (the job's SLURM_* variables) plus the SCRUN_* output variables, for
    a container whose anchor is this process (scrun-stage and scrun-lua-check stand in for
    one). `version` None: unknown, so no SLURM_CONTAINER_ID."""
    uid, gid = real_ids()
    env = dict(slurm_part)
    env.update(
        job_options.output_variables(
            oci_version=bundle.oci_version,
            container_id=spool.container_id,
            anchor_pid=os.getpid(),
            bundle=bundle.path,
            submission_bundle=submission_bundle or "",
            annotations=bundle.annotations,
            pid_file=pid_file or "",
            socket=spool.socket,
            spool_dir=spool.dir_for_scripts,
            config_file=bundle.config_file,
            user=user_name(uid),
            user_id=uid,
            group=group_name(gid),
            group_id=gid,
            root=spool.root,
            rootfs_path=bundle.rootfs,
            log_file=log_file,
            log_format=log_format if log_file else None,
        )
    )
    env["SLURM_CONTAINER"] = bundle.path
    if version is not None and supports_container_id(version):
        env["SLURM_CONTAINER_ID"] = spool.container_id
    return env


def slurm_part(record: Mapping[str, str], slurm_conf: str) -> dict[str, str]:
    """The job's SLURM_* variables, from its `scontrol -o show job` record."""
    return job_options.job_environment(record, cluster_name(slurm_conf), os.uname().nodename)
