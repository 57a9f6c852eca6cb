"""What `scrun pause`, `resume` and `ps` do to a running container: act on its Slurm steps
on the compute nodes, never on this host (where only the anchor runs).

The container's processes are those of its step (found by name, as the anchor finds it)
and, in a job of its own, of its `scrun exec` steps. Pausing is `scancel --signal=STOP` on
each of them, resuming `--signal=CONT`: slurmstepd freezes and thaws the step's processes
(with proctrack/cgroup, through the cgroup freezer), on every node of the step, as the
job's user may; the job stays RUNNING in Slurm's records, its allocation still held.
Listing runs one task per node of the job (beside the container, --overlap) that asks its
slurmstepds for the steps' pids (`scontrol listpids`, which only works on the node) and
shows them with that node's `ps`.
"""

from __future__ import annotations

import shlex
import time

from scrunlib.errors import SlurmError, StateError
from scrunlib.signals import SIGCONT, SIGSTOP
from scrunlib.slurm import STEP_POLL_SECONDS, Slurm
from scrunlib.slurm_commands import container_step_names, remote_command_argv
from scrunlib.state import ContainerState, process_alive

# The anchor records the container as running once it has started the step's srun; Slurm
# lists the step a moment later, once slurmctld has created it. A command that comes right
# after `start` (`podman run -d` then `exec`) waits at most this many seconds for it.
STEP_LISTED_WITHIN = 5.0

# `ps` columns when the caller names none: who, which, how long, what
DEFAULT_PS_OPTIONS = ("-o", "user,pid,ppid,stat,etime,time,args")
PS_STEP_NAME = "scrun-ps"


def container_steps(slurm: Slurm, state: ContainerState) -> list[int]:
    """The ids of the container's running steps (scrunlib.slurm_commands's
    container_step_names: its own and its exec steps)."""
    assert state.job_id is not None
    names = container_step_names(state.step_name, state.existing_job)
    steps = listed_steps(slurm, state, names)
    if not steps:
        raise StateError(f"container {state.id!r} has no running step in job {state.job_id}")
    return steps


def listed_steps(slurm: Slurm, state: ContainerState, names: tuple[str, ...]) -> list[int]:
    """The ids of the container's running steps named any of `names`. While Slurm lists
    none and the step's srun still runs on this host (just started: its step is being
    created), Slurm is asked again, for STEP_LISTED_WITHIN seconds at most."""
    assert state.job_id is not None
    deadline = time.monotonic() + STEP_LISTED_WITHIN
    while True:
        steps = slurm.step_ids(state.job_id, *names)
        if (
            steps
            or time.monotonic() >= deadline
            or not process_alive(state.step_pid, state.step_start_time)
        ):
            return steps
        time.sleep(STEP_POLL_SECONDS)


def where(state: ContainerState, steps: list[int]) -> str:
    """`job 5 steps 5.0, 5.1 on n[1-2]`: what a command acted on, for its log line."""
    names = ", ".join(f"{state.job_id}.{step}" for step in steps)
    return f"job {state.job_id} step{'s' if len(steps) > 1 else ''} {names} on {state.nodes}"


def set_frozen(slurm: Slurm, state: ContainerState, steps: list[int], frozen: bool) -> None:
    """Freeze (SIGSTOP) or thaw (SIGCONT) the steps' processes on all their nodes
    (SlurmError when Slurm cannot, a suspended job's among them)."""
    assert state.job_id is not None
    for step in steps:
        if not slurm.cancel(state.job_id, signal=SIGSTOP if frozen else SIGCONT, step_id=step):
            raise SlurmError(
                f"cannot signal step {state.job_id}.{step}: Slurm says it is not running "
                "(a suspended job)"
            )


def ps_script(scontrol: str, job_id: int, steps: list[int], ps_options: list[str]) -> str:
    """The node's part of `scrun ps`: the steps' pids from slurmstepd, then `ps` on them,
    each line prefixed with the node's name and a tab. Nothing on a node without them."""
    listings = "; ".join(f"{shlex.quote(scontrol)} listpids {job_id}.{step}" for step in steps)
    return (
        f"pids=$({{ {listings}; }} 2>/dev/null | while read -r pid rest; do "
        "case $pid in ''|*[!0-9]*) ;; *) printf '%s,' \"$pid\" ;; esac; done); "
        '[ -n "$pids" ] || exit 0; '
        f'ps {shlex.join(ps_options)} -p "${{pids%,}}" | '
        'while IFS= read -r line; do printf \'%s\\t%s\\n\' "$SLURMD_NODENAME" "$line"; done'
    )


def ps_argv(
    slurm: Slurm, state: ContainerState, steps: list[int], ps_options: list[str]
) -> list[str]:
    assert state.job_id is not None
    script = ps_script(slurm.path("scontrol"), state.job_id, steps, ps_options)
    return remote_command_argv(
        slurm.path("srun"), state.job_id, script, PS_STEP_NAME, nodes=state.nodes
    )


def ps_table(output: str) -> str:
    """The nodes' `node<TAB>line` output as one table: a NODE column, the first node's
    header once, then every node's processes in node order."""
    headers: dict[str, str] = {}
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        node, tab, text = line.partition("\t")
        if not tab:
            continue
        if node not in headers:
            headers[node] = text
            rows[node] = []
        else:
            rows[node].append(text)
    if not headers:
        return ""
    width = max(len("NODE"), *(len(node) for node in headers))
    lines = [f"{'NODE':<{width}}  {next(iter(headers.values()))}"]
    for node in sorted(rows):
        lines += [f"{node:<{width}}  {row}" for row in rows[node]]
    return "\n".join(lines) + "\n"
