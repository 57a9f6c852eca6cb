"""Ending what a container holds, once: its job (or its steps in a job it joined), its
preparation if still in flight, its staged copy, its socket. Used by creation's undo and by
the serving container when it stops."""

from __future__ import annotations

import os

from scrunlib import log
from scrunlib.bundle import remove_node_copy
from scrunlib.errors import SlurmError
from scrunlib.slurm import Allocation, Slurm
from scrunlib.state import ContainerState

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from _socket import socket as raw_socket

    from scrunlib.spool import Spool

    from scrun_anchor.preparation import Preparation

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


def end_preparation(
    preparation: Preparation, exit_code: int | None = None, *, tasks_ended: bool = True
) -> None:
    """Everything a container's preparation holds, undone in reverse: what is in flight
    stopped (a queued job withdrawn), the bundle copy for slurmd removed, stage-out run
    (also after a failed stage-in, so that the script can remove what it staged), the job
    ended with `exit_code` (None: cancelled). Stage-out never copies files a task may still
    write: unless `tasks_ended`, it stays pending (stage.json), for `scrun delete` to run
    once Slurm has ended the tasks with the job."""
    preparation.abandon()
    state = preparation.state
    if preparation.run_bundle is not None:
        remove_node_copy(preparation.run_bundle, state.bundle)
    if preparation.staging is not None and not tasks_ended:
        log.error(f"stage-out of container {state.id} left to `scrun delete`: its tasks may run")
    elif preparation.staging is not None:
        with preparation.clock.phase("stage-out"):
            preparation.staging.stage_out()
    if preparation.allocation is None and not state.existing_job:
        state.job_ended = True  # never granted: withdrawn with its submission
    elif state.job_id is not None:
        with preparation.clock.phase("teardown"):
            end_job(preparation.slurm, state, state.job_id, preparation.allocation, exit_code)


def close_server(server: raw_socket, spool: Spool) -> None:
    server.close()
    try:  # noqa: SIM105 (contextlib.suppress: not imported on this path)
        os.unlink(spool.socket)
    except FileNotFoundError:
        pass
