"""The engines' own GPU options, as they reach `create` in config.json: docker's `--gpus N`
becomes the job's GPU request; what Slurm cannot give as asked is refused in one line that
names the SCRUN_* variable to use. Podman and docker resolve these options on the login
host, which has no GPU, so by themselves they fail before calling scrun (measured with
podman 4.3, 5.4, 5.8 and docker 20.10, 26.1, 28.5; docs/site-guide.md, "GPUs"):

- A CDI name, `--device nvidia.com/gpu=NAME` (podman; docker ≥ 25 with CDI on) and podman
  5's `--gpus NAME` (it means `--device nvidia.com/gpu=NAME`): the engine applies the login
  host's spec of the kind. scrun's marker spec (`scrun-cdi login-spec`, below
  `marker_spec`) gives each name only an environment entry, `SCRUN_CDI_<KIND>_<NAME>=
  <kind>=<name>`, so the engine calls scrun with the names it resolved. A name is a device
  of one host, an index or `all`; Slurm gives a job some GPUs of the node it picks and
  cannot pin one: always refused. (podman 4.3 drops `--gpus`: nothing reaches scrun.)
- docker's `--gpus`: dockerd's NVIDIA device driver, registered when a program named
  `nvidia-container-runtime-hook` is on dockerd's PATH (the toolkit's, or scrun's stub:
  `scrun-cdi docker-hook`), adds a prestart hook of that name and appends
  `NVIDIA_VISIBLE_DEVICES`: `0,1,…,N-1` for `--gpus N`, `all`, the ids of `--gpus
  device=…`, `void` (or nothing, docker 20.10) for `--gpus 0`. A count becomes
  `SCRUN_GPUS_PER_NODE=N` in the container's environment, as `-e` would put it: every node
  of the job has N GPUs for the container, as a docker host gives it N. `--gpus
  device=0,1` writes what `--gpus 2` writes and is taken as that; `all` and any other ids
  are refused. The hook and docker's entry are dropped: the node's CDI spec gives the GPUs.
  (The last entry is docker's: docker 20.10 writes none for `--gpus 0`, so an image's own,
  a CUDA image's `all`, is read then, and refused.)

Only scrun's own modules: `create` imports this, and a config without these options costs
one pass over its environment and hooks.
"""

from __future__ import annotations

from scrunlib.errors import InvalidInput

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from scrunlib.bundle import Bundle

MARKER_PREFIX = "SCRUN_CDI_"
DOCKER_HOOK = "nvidia-container-runtime-hook"
DOCKER_DEVICES = "NVIDIA_VISIBLE_DEVICES"
REQUEST = "SCRUN_GPUS_PER_NODE"
# Besides the GPU counts (SCRUN_GPUS, …), what asks the job for GPUs when it names a gpu
GRES_VARIABLES = ("SCRUN_GRES", "SCRUN_TRES_PER_TASK")
# The marker spec's devices: its CDI version (digits first in a name need 0.5.0), the
# names of GPUs it declares by default, and the createRuntime hook that fails a container
# any other runtime than scrun is asked to run with them (/bin/sh; argv[0] says whose)
MARKER_CDI_VERSION = "0.5.0"
MARKER_DEVICES = 16
GUARD_NAME = "scrun-gpu-guard"


def marker_variable(kind: str, name: str) -> str:
    """`SCRUN_CDI_NVIDIA_COM_GPU_0` for nvidia.com/gpu=0: one per device, as CDI sets an
    environment variable of the same name once."""
    word = "".join(c if c.isascii() and c.isalnum() else "_" for c in f"{kind}_{name}")
    return MARKER_PREFIX + word.upper()


def marker_spec(kind: str, count: int = MARKER_DEVICES) -> dict[str, Any]:
    """The login host's CDI spec of `kind`: devices `all` and `0`…`count-1`, each adding only
    its marker to the environment, and a hook that fails any runtime but scrun."""
    message = (
        f"{kind}: this host has no GPU; a container gets one through scrun "
        f"(--runtime scrun, -e {REQUEST}=N)"
    )
    guard = {
        "hookName": "createRuntime",
        "path": "/bin/sh",
        "args": [GUARD_NAME, "-c", f"echo '{message}' >&2; exit 1"],
    }
    names = ["all", *(str(i) for i in range(count))]
    return {
        "cdiVersion": MARKER_CDI_VERSION,
        "kind": kind,
        "containerEdits": {"hooks": [guard]},
        "devices": [
            {"name": n, "containerEdits": {"env": [f"{marker_variable(kind, n)}={kind}={n}"]}}
            for n in names
        ],
    }


def engine_request(bundle: Bundle, caller_env: Mapping[str, str]) -> dict[str, Any] | None:
    """The config to run instead of the bundle's when the engine's own GPU option is in it
    (a new dict), None when none is. Raises InvalidInput for one Slurm cannot give as
    asked, or one asked for beside a SCRUN_* GPU variable (the caller's or the
    container's)."""
    names = [e.split("=", 1)[1] for e in bundle.env if e.startswith(MARKER_PREFIX) and "=" in e]
    if names:
        raise InvalidInput(_refusal_of_names(names))
    hooks = bundle.config.get("hooks")
    found = _docker_hooks(hooks) if isinstance(hooks, dict) else []
    if not found or not isinstance(hooks, dict):
        return None
    kept = {
        stage: [h for h in entries if h not in found] if isinstance(entries, list) else entries
        for stage, entries in hooks.items()
    }
    config = {**bundle.config, "hooks": kept}
    env = list(bundle.env)
    at = _last(env, DOCKER_DEVICES)
    devices = env[at].split("=", 1)[1] if at is not None else ""
    if at is None or devices in ("void", "none", ""):
        return config  # --gpus 0: no GPU, and no hook for the nodes to run
    count = _count(devices)
    if count is None:
        option = "--gpus all" if devices == "all" else f"--gpus device={devices}"
        what = "every GPU of one host" if devices == "all" else "GPUs of one host by their ids"
        raise InvalidInput(
            f"docker's {option} asks for {what}, which Slurm cannot pin on a node: ask for a "
            f"count, --gpus N or -e {REQUEST}=N"
        )
    other = _other_request(caller_env, env)
    if other:
        raise InvalidInput(f"docker's --gpus {count} and {other} both ask for GPUs: give one")
    del env[at]
    config["process"] = {**bundle.config["process"], "env": [*env, f"{REQUEST}={count}"]}
    return config


def _refusal_of_names(names: list[str]) -> str:
    """`names` (CDI's kind=name) refused, in the words the user typed them in."""
    from scrunlib.cdi import DEFAULT_KIND

    typed = " ".join(f"--device {name}" for name in names)
    kinds = {name.split("=", 1)[0] for name in names}
    if kinds == {DEFAULT_KIND}:  # podman 5's --gpus X is --device nvidia.com/gpu=X
        typed += f" (or podman's --gpus {','.join(n.split('=', 1)[1] for n in names)})"
    if any(name.endswith("=all") for name in names):
        return (
            f"{typed} asks for every GPU of one host, which Slurm cannot pin on a node: "
            f"ask for a count, -e {REQUEST}=N"
        )
    return (
        f"{typed} names GPUs of one host, which Slurm cannot pin on a node: ask for a count, "
        f"-e {REQUEST}={len(names)}"
    )


def _docker_hooks(hooks: dict[str, Any]) -> list[Any]:
    """The hooks dockerd's NVIDIA driver added (prestart; the program by its name)."""
    return [
        hook
        for entries in hooks.values()
        if isinstance(entries, list)
        for hook in entries
        if isinstance(hook, dict) and _runs_docker_hook(hook)
    ]


def _runs_docker_hook(hook: dict[str, Any]) -> bool:
    args, path = hook.get("args"), hook.get("path")
    if isinstance(args, list) and args and args[0] == DOCKER_HOOK:
        return True
    return isinstance(path, str) and path.endswith("/" + DOCKER_HOOK)


def _last(env: list[str], name: str) -> int | None:
    """The index of the last entry of `name` (docker appends its own after the image's)."""
    prefix = name + "="
    for index in range(len(env) - 1, -1, -1):
        if env[index].startswith(prefix):
            return index
    return None


def _count(devices: str) -> int | None:
    """N when `devices` is docker's `--gpus N`, `0,1,…,N-1`; None otherwise."""
    ids = devices.split(",")
    return len(ids) if ids == [str(i) for i in range(len(ids))] else None


def _other_request(caller_env: Mapping[str, str], env: list[str]) -> str:
    """A SCRUN_* GPU request besides the engine's (`NAME=value`), or ""."""
    from scrunlib.job_options import VARIABLES
    from scrunlib.value_kinds import GPU_COUNT

    values = dict(caller_env)
    for entry in env:  # the container's win
        name, _, value = entry.partition("=")
        values[name] = value
    for variable in VARIABLES:
        value = values.get(variable.name, "")
        if (variable.kind is GPU_COUNT and value) or (
            variable.name in GRES_VARIABLES and "gpu" in value
        ):
            return f"{variable.name}={value}"
    return ""
