"""`scrun update [--time-limit TIME] [--resources FILE|-] [RUNC OPTIONS] ID`: change what
Slurm lets a running job change.

A container's limits are its Slurm job's, set when the job was allocated. Of what the
engines pass (`podman update`, `docker update`: an OCI `linux.resources` object in
--resources, `-` for stdin; runc's single-value options) Slurm can change none for a
running job: not its CPUs, not its memory (22.05 to 26.05: "Job is no longer pending
execution"), not the rest, which are the node's cgroups'. What it can change, a shorter
time limit, has no OCI field: `--time-limit` (Slurm's time format) sets it with
`scontrol update JobId=<job> TimeLimit=<time>`. Anything set (neither zero nor empty:
docker sends zeros for what it leaves alone) is refused in one line, nothing applied.
"""

from __future__ import annotations

import json
import sys

from scrunlib import log
from scrunlib.errors import InvalidInput, ScrunError, StateError, reason
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.state import ContainerState, Status

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# runc's `update` options, each a field of linux.resources
RUNC_OPTIONS = {
    "blkio-weight": "blockIO.weight",
    "cpu-period": "cpu.period",
    "cpu-quota": "cpu.quota",
    "cpu-share": "cpu.shares",
    "cpu-rt-period": "cpu.realtimePeriod",
    "cpu-rt-runtime": "cpu.realtimeRuntime",
    "cpuset-cpus": "cpu.cpus",
    "cpuset-mems": "cpu.mems",
    "kernel-memory": "memory.kernel",
    "kernel-memory-tcp": "memory.kernelTCP",
    "memory": "memory.limit",
    "memory-reservation": "memory.reservation",
    "memory-swap": "memory.swap",
    "pids-limit": "pids.limit",
    "l3-cache-schema": "intelRdt.l3CacheSchema",
    "mem-bw-schema": "intelRdt.memBwSchema",
}
SUPPORTED = "scrun update supports only --time-limit (a running Slurm job's time limit)"
OPTIONS = (
    Opt("time-limit", value=True, metavar="TIME", help="the job's new time limit (Slurm's format)"),
    Opt("resources", "r", value=True, metavar="FILE", help="OCI linux.resources JSON (- = stdin)"),
    *(Opt(name, value=True, help=f"refused: {field}") for name, field in RUNC_OPTIONS.items()),
)
USAGE = usage_text(
    "scrun update [--time-limit TIME] [--resources FILE|-] CONTAINER-ID",
    "Change the container's Slurm job: --time-limit (scontrol update TimeLimit; Slurm lets\n"
    "users only shorten it). CPU, memory and the other OCI resources cannot change for a\n"
    "running job: asking for them is refused, nothing is applied.",
    OPTIONS,
)


def set_fields(value: Any, prefix: str = "") -> list[str]:
    """The dotted names of the fields of `value` that ask for something: not null, not
    zero, not empty."""
    if isinstance(value, dict):
        return [
            name
            for key, item in value.items()
            for name in set_fields(item, f"{prefix}.{key}" if prefix else str(key))
        ]
    return [prefix] if value not in (None, 0, "", [], False) else []


def load_resources(source: str) -> Any:
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as stream:
                text = stream.read()
        return json.loads(text) if text.strip() else {}
    except OSError as exc:
        raise InvalidInput(f"update: cannot read resources {source}: {reason(exc)}") from exc
    except ValueError as exc:
        raise InvalidInput(f"update: resources {source} are not valid JSON: {exc}") from exc


def requested(values: dict[str, Any]) -> list[str]:
    """What the caller asks to change beyond the time limit, as linux.resources fields."""
    fields = [RUNC_OPTIONS[name] for name in RUNC_OPTIONS if values.get(name) not in (None, "0")]
    if values.get("resources"):
        resources = load_resources(str(values["resources"]))
        if not isinstance(resources, dict):
            raise InvalidInput("update: resources must be a JSON object")
        fields += set_fields(resources)
    return sorted(set(fields))


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="update")
    (container_id,) = one_id(words, "update")
    refused = requested(values)
    if refused:
        raise ScrunError(
            f"update: {', '.join(refused)} cannot change for a running Slurm job; {SUPPORTED}"
        )
    time_limit = values.get("time-limit")
    if not time_limit:
        return 0
    state = ContainerState.load(ctx.spool(container_id))
    status = state.effective_status()
    if status not in (Status.CREATED, Status.RUNNING, Status.PAUSED) or state.job_id is None:
        raise StateError(f"container {container_id!r} is {status}: cannot update")
    if state.existing_job:
        raise StateError(
            f"update: container {container_id!r} runs in job {state.job_id}, which it joined: "
            "its time limit is not scrun's to change"
        )
    from scrunlib.slurm import Slurm, last_line
    from scrunlib.slurm_commands import time_limit_argv

    slurm = Slurm(ctx.site, ctx.slurm_conf)
    code, out, err = slurm.run(
        time_limit_argv(slurm.path("scontrol"), state.job_id, str(time_limit))
    )
    if code != 0:
        raise ScrunError(f"update: job {state.job_id}: {last_line(err or out)}")
    log.verbose(f"update: job {state.job_id} time limit {time_limit}")
    return 0
