"""`scrun ps [--format table|json] ID [PS-OPTIONS...]`: the container's processes, listed
by `ps` on the compute nodes that run them (scrunlib.container_steps), with a NODE column.

`--format json` is runc's list of pids, which docker's `top` looks up with the `ps` of the
host dockerd runs on. The container's own pids are the compute nodes', where they name
other processes or none; so it lists what the container is on this host, as `podman top`
does: the processes of the anchor's pid namespace (the anchor, its salloc and srun,
scrunlib.pidns). An anchor that could not make one has the host's: scrun refuses then, in
one line that names the nodes and `scrun ps`, rather than list this host's processes as
the container's.
"""

from __future__ import annotations

import sys

from scrunlib.errors import ScrunError, StateError, UsageError
from scrunlib.options import Opt, parse, usage_text
from scrunlib.state import ContainerState, Status

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OPTIONS = (Opt("format", "f", value=True, metavar="FORMAT", help="table (default) or json"),)
USAGE = usage_text(
    "scrun ps [--format table|json] CONTAINER-ID [PS-OPTIONS...]",
    "List the container's processes on its compute nodes: `ps PS-OPTIONS` (default\n"
    "-o user,pid,ppid,stat,etime,time,args) on each node of its job, for the pids slurmstepd\n"
    "gives for the container's steps (`scontrol listpids`), with a NODE column. The pids are\n"
    "the nodes', not this host's. --format json: the pids on this host of the anchor's pid\n"
    "namespace (the anchor, its salloc and srun), as docker's `top` shows them.",
    OPTIONS,
)


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="ps", stop_at_first_word=True)
    if not words:
        raise UsageError("ps: container id not provided")
    container_id, ps_options = words[0], list(words[1:])
    form = str(values.get("format") or "table")
    if form not in ("table", "json"):
        raise UsageError(f"ps: unknown format {form!r}: expected table or json")
    state = ContainerState.load(ctx.spool(container_id))
    status = state.effective_status()
    if status not in (Status.RUNNING, Status.PAUSED) or state.job_id is None:
        raise StateError(f"container {container_id!r} is {status}: no processes to list")
    if form == "json":
        from scrunlib import leanjson, pidns

        pids = pidns.members(state.anchor_pid)
        if pids:
            sys.stdout.write(leanjson.dumps(pids) + "\n")
            return 0
        raise ScrunError(
            f"ps --format json: the processes of container {container_id!r} run on "
            f"{state.nodes} (Slurm job {state.job_id}), not on this host, whose pids they "
            f"are not: `scrun ps {container_id}` lists them there"
        )

    from scrunlib.container_steps import DEFAULT_PS_OPTIONS, container_steps, ps_argv, ps_table
    from scrunlib.slurm import Slurm, last_line

    slurm = Slurm(ctx.site, ctx.slurm_conf)
    steps = container_steps(slurm, state)
    code, out, err = slurm.run(ps_argv(slurm, state, steps, ps_options or list(DEFAULT_PS_OPTIONS)))
    if code != 0:
        raise ScrunError(f"ps on {state.nodes} failed: {last_line(err or out)}")
    sys.stdout.write(ps_table(out))
    return 0
