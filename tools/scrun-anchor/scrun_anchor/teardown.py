"""Ending what a container holds outside the anchor, once: its job (or its steps in a job
it joined), given as arguments, and its socket. Used by the preparation's end
(scrun_anchor.preparation) and by creation's undo and the serving container."""

from __future__ import annotations

import os

from scrunlib import log
from scrunlib.errors import SlurmError
from scrunlib.slurm import Allocation, Slurm
from scrunlib.state import ContainerState

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from _socket import socket as raw_socket

    from scrunlib.spool import Spool

# How long salloc may take to notice that its job was cancelled before it is killed.
REAP_SECONDS = 10.0


def end_job(
    slurm: Slurm,
    state: ContainerState,
    job_id: int,
    allocation: Allocation | None = None,
    exit_code: int | None = None,
) -> None:
    """End what is the container's in Slurm, once: our allocation with the container's
    `exit_code` (salloc ends the job with it: COMPLETED 0:0, FAILED 3:0, FAILED 0:9), else
    by scancel (no container ran, or salloc did not end it; in a job we joined, only our
    steps); `delete` relies on job_ended."""
    if state.job_ended:
        return
    grace = slurm.site.step_grace + 30
    if allocation is not None and exit_code is not None:
        if allocation.release(exit_code, timeout=grace):
            state.job_ended = True
            return
        log.error(f"salloc of job {job_id} did not end it; cancelling it")
    try:
        slurm.end_container_job(job_id, existing_job=state.existing_job, step_name=state.step_name)
        state.job_ended = True
    except SlurmError as exc:
        log.error(str(exc))
    if allocation is not None:
        allocation.reap(timeout=REAP_SECONDS)


def close_server(server: raw_socket, spool: Spool) -> None:
    server.close()
    try:  # noqa: SIM105 (contextlib.suppress: not imported on this path)
        os.unlink(spool.socket)
    except FileNotFoundError:
        pass
