"""The engines' own memory and CPU limits, as they reach `create` in config.json, become the
job's size.

`podman run --memory 64m` and `docker run --memory 64m` write `linux.resources.memory.limit`
(bytes); `--cpus 2` writes `linux.resources.cpu.quota` 200000 over `period` 100000. On a
compute node the runtime runs under Slurm's cgroups (oci.conf's crun with
`--cgroup-manager=disabled`), so those limits would be dropped without a word: the
container would get the job's memory and one CPU. Instead they become what the job asks
Slurm for, as `-e` would put them in the container's environment: `SCRUN_MEM_PER_NODE`
(MiB, rounded up) and `SCRUN_CPUS_PER_TASK` (the quota's CPUs, rounded up). Slurm then
enforces them, for the container and everything of scrun's that runs in its job.

A SCRUN_* variable that sizes the same thing (the caller's or the container's) wins: sites
and users who size jobs the Slurm way keep doing so, and the engine's limit is then left
out. Other resources (`--cpuset-cpus` names one host's CPUs, `--pids-limit`, podman's default
pids limit, shares, swap) are not Slurm's to give and are left as they are.

Only scrun's own modules: `create` imports this, and a config without these limits costs a
few dictionary lookups; job_options (the anchor imports it anyway) comes in only with one.
"""

from __future__ import annotations

from scrunlib import log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

MEMORY_REQUEST = "SCRUN_MEM_PER_NODE"
CPU_REQUEST = "SCRUN_CPUS_PER_TASK"
# What sizes the job's memory or CPUs the Slurm way: any of them set, the engine's goes.
MEMORY_VARIABLES = (MEMORY_REQUEST, "SCRUN_MEM_PER_CPU", "SCRUN_MEM_PER_GPU")
CPU_VARIABLES = (CPU_REQUEST, "SCRUN_CPUS_PER_GPU")
MIB = 1 << 20


def engine_request(config: dict[str, Any], caller_env: Mapping[str, str]) -> dict[str, Any] | None:
    """The config to run instead of `config` when it holds an engine's memory or CPU limit
    that no SCRUN_* variable overrides (a new dict: the limit in the container's
    environment), None otherwise. `config` is already checked (scrunlib.bundle)."""
    resources = _field(config.get("linux"), "resources")
    memory = _positive(_field(resources, "memory").get("limit"))
    cpu = _field(resources, "cpu")
    quota, period = _positive(cpu.get("quota")), _positive(cpu.get("period")) or 100_000
    if not memory and not quota:
        return None
    from scrunlib.job_options import merge_environment

    env: list[str] = list(config["process"].get("env", []))
    given = merge_environment(caller_env, env)  # scrun's view: the container's win
    added = []
    if memory:
        added += _request(MEMORY_REQUEST, f"{-(-memory // MIB)}M", MEMORY_VARIABLES, given)
    if quota:
        added += _request(CPU_REQUEST, str(-(-quota // period)), CPU_VARIABLES, given)
    if not added:
        return None
    return {**config, "process": {**config["process"], "env": [*env, *added]}}


def _request(
    name: str, value: str, overriding: tuple[str, ...], given: Mapping[str, str]
) -> list[str]:
    """`[name=value]`, or nothing when one of `overriding` is set."""
    already = [f"{n}={given[n]}" for n in overriding if given.get(n)]
    if already:
        log.verbose(f"the engine's {name}={value} is left out: {already[0]} sizes the job")
        return []
    log.verbose(f"the engine's limit asks the job for {name}={value}")
    return [f"{name}={value}"]


def _field(parent: Any, key: str) -> dict[str, Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else {}


def _positive(value: Any) -> int:
    """An integer limit, 0 when unset, malformed or unlimited (-1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return 0
    return value
