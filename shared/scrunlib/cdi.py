"""The node's CDI specs applied to a container step's OCI config: the GPUs Slurm gave the step
become the container's devices, mounts, environment and hooks (scrun-cdi-run, on the nodes).

Why on the node: podman and docker resolve `--device nvidia.com/gpu=...` on the login host,
which has no GPU, and which GPUs a job gets is known only on its node at step launch.

What the step was given comes from Slurm:
- 23.02 and later write the step's environment into the config.json the runtime gets
  (`SLURM_STEP_GPUS`, `CUDA_VISIBLE_DEVICES`, ...); the runtime command's own environment is
  slurmd's, without them.
- 22.05 gives neither any trace of the step's gres: the job's record does
  (`scontrol show job -d`: `Nodes=n1 ... GRES=gpu:1(IDX:1)`), and the environment Slurm would
  have set for a task is then added here (`environment_for`).
The numbers are the GPUs' indexes on the node (the order of gres.conf's File=), which is how
`nvidia-ctk cdi generate` names its devices ("0", "1", ...; `--device-name-strategy=index`).

A spec is CDI's JSON, or YAML when PyYAML can be imported (the scrun distribution depends on
it; a node with only the standard library reads JSON: `nvidia-ctk cdi generate --format=json`).
Only the standard library is imported here otherwise: the module runs on compute nodes,
on every container step's way (json and re only where used: a step without GPUs needs
neither).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# CDI's spec directories, lowest priority first (a later one's device of the same name wins)
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
DEFAULT_KIND = "nvidia.com/gpu"
# The step's GPUs in the environment Slurm writes into the config (23.02+)
STEP_GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# containerEdits keys this module applies; any other, non-empty, is refused (applying a spec
# in part would hand the container a GPU it cannot use, silently)
_EDIT_KEYS = frozenset({"env", "deviceNodes", "mounts", "hooks", "additionalGids"})
_HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


class CdiError(Exception):
    """One line for the step's stderr: what is wrong, on which node, in which file."""


class Spec:
    """The devices of one kind from the node's spec files, and the edits every GPU brings.
    (A plain class: dataclasses' import costs each container step 10 ms.)"""

    def __init__(self, kind: str, dirs: tuple[str, ...]) -> None:
        self.kind = kind
        self.dirs = dirs  # where it was looked for
        # device name -> (its containerEdits, the file it came from)
        self.devices: dict[str, tuple[dict[str, Any], str]] = {}
        # (the spec-wide containerEdits, its file), one per file of this kind
        self.common: list[tuple[dict[str, Any], str]] = []
        self.files: list[str] = []


def _parse(path: str, text: str) -> Any:
    import json

    if path.endswith(".json"):
        return json.loads(text)
    try:
        import yaml
    except ImportError:
        raise CdiError(
            f"{path}: a YAML spec needs PyYAML on the node (pip install pyyaml), or write the "
            "spec as JSON: nvidia-ctk cdi generate --format=json --output=/etc/cdi/nvidia.json"
        ) from None
    return yaml.safe_load(text)


def load_spec(node: str, kind: str, dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS) -> Spec:
    """Every spec of `kind` in `dirs` (*.json, *.yaml, *.yml), merged by CDI's priority.
    Raises CdiError naming the node and the file for an unreadable or malformed one."""
    spec = Spec(kind, dirs)
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CdiError(f"node {node}: {directory}: {exc.strerror}") from None
        for name in names:
            if not name.endswith((".json", ".yaml", ".yml")):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise CdiError(f"node {node}: {path}: {exc.strerror}") from None
            try:
                document = _parse(path, text)
            except CdiError as exc:
                raise CdiError(f"node {node}: {exc}") from None
            except Exception as exc:  # json's ValueError, PyYAML's YAMLError
                raise CdiError(f"node {node}: {path}: not a CDI spec: {exc}") from None
            if not isinstance(document, dict) or document.get("kind") != kind:
                continue
            _add(spec, node, path, document)
    return spec


def _add(spec: Spec, node: str, path: str, document: dict[str, Any]) -> None:
    devices = document.get("devices")
    if not isinstance(devices, list):
        raise CdiError(f"node {node}: {path}: not a CDI spec: no device list")
    for device in devices:
        if not isinstance(device, dict) or not isinstance(device.get("name"), str):
            raise CdiError(f"node {node}: {path}: not a CDI spec: a device without a name")
        spec.devices[device["name"]] = (device.get("containerEdits") or {}, path)
    spec.common.append((document.get("containerEdits") or {}, path))
    spec.files.append(path)


def parse_indexes(text: str) -> list[int]:
    """Slurm's GPU index list ("0,1", "0-2,5") in order, each once."""
    indexes: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"not a GPU index list: {text!r}")
        for index in range(int(low), int(high or low) + 1):
            if index not in indexes:
                indexes.append(index)
    return indexes


def step_gpus(env: list[str]) -> list[int] | None:
    """The step's GPUs from the config's environment (23.02+), None when Slurm wrote none."""
    values = dict(entry.split("=", 1) for entry in env if "=" in entry)
    for name in STEP_GPU_VARIABLES:
        if name in values:
            return parse_indexes(values[name])
    return None


def _expand_hostlist(expression: str) -> list[str]:
    """Slurm's host list ("n1", "n[1-3,5]", "a1,b[2-3]") as names."""
    import re

    names: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?(?:,|$)", expression):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{width}d}")
    return names


def job_gpus_on_node(job_record: str, node: str) -> list[int]:
    """The node's GPU indexes from `scontrol show job -d`'s per-node lines
    (`Nodes=n[1-2] CPU_IDs=0 Mem=512 GRES=gpu:1(IDX:0)`; a typed gres `gpu:a100:2(IDX:0-1)`)."""
    import re

    gpus: list[int] = []
    for line in job_record.splitlines():
        nodes = re.search(r"\bNodes=(\S+)", line)
        gres = re.search(r"\bGRES=(\S+)", line)
        if not nodes or not gres or node not in _expand_hostlist(nodes.group(1)):
            continue
        for match in re.finditer(r"(?:^|,)gpu[^(,]*\(IDX:([0-9,\-]+)\)", gres.group(1)):
            gpus.extend(i for i in parse_indexes(match.group(1)) if i not in gpus)
    return gpus


def environment_for(gpus: list[int]) -> dict[str, str]:
    """What Slurm sets for a task with these GPUs of the node under ConstrainDevices (its
    task sees only them, numbered from 0), as 23.02+ writes it into the config itself."""
    visible = ",".join(str(i) for i in range(len(gpus)))
    return {
        "SLURM_STEP_GPUS": ",".join(str(i) for i in gpus),
        "SLURM_GPUS_ON_NODE": str(len(gpus)),
        "CUDA_VISIBLE_DEVICES": visible,
        "GPU_DEVICE_ORDINAL": visible,
    }


def apply(config: dict[str, Any], spec: Spec, gpus: list[int], node: str) -> None:
    """Apply the spec-wide edits and each GPU's device edits to `config`, in place.
    Raises CdiError naming the node and the file when a GPU has no device or an edit cannot
    be applied."""
    if not spec.files:
        raise CdiError(
            f"node {node}: no CDI spec of kind {spec.kind} in {', '.join(spec.dirs)} "
            f"for the step's GPUs {','.join(map(str, gpus))}"
        )
    edits: list[tuple[dict[str, Any], str]] = []
    for gpu in gpus:
        found = spec.devices.get(str(gpu))
        if found is None:
            raise CdiError(
                f"node {node}: {', '.join(spec.files)}: no device {spec.kind}={gpu} "
                f"for the step's GPU {gpu}"
            )
        edits.append(found)
    for edit, path in [*spec.common, *edits]:
        _apply_edits(config, edit, path, node)


def _apply_edits(config: dict[str, Any], edits: dict[str, Any], path: str, node: str) -> None:
    unknown = sorted(k for k, v in edits.items() if v and k not in _EDIT_KEYS)
    if unknown:
        raise CdiError(f"node {node}: {path}: containerEdits {', '.join(unknown)} not supported")
    process = config.setdefault("process", {})
    for entry in edits.get("env") or []:
        _set_env(process, entry)
    for device in edits.get("deviceNodes") or []:
        _add_device(config, device, path, node)
    for mount in edits.get("mounts") or []:
        _add_mount(config, mount, path, node)
    for hook in edits.get("hooks") or []:
        name = hook.get("hookName")
        if name not in _HOOK_NAMES or not isinstance(hook.get("path"), str):
            raise CdiError(f"node {node}: {path}: a hook without a valid hookName and path")
        oci_hook = {k: hook[k] for k in ("path", "args", "env", "timeout") if k in hook}
        hooks = config.setdefault("hooks", {}).setdefault(name, [])
        if oci_hook not in hooks:  # two specs of the kind (a .yaml and a .json) name it twice
            hooks.append(oci_hook)
    for gid in edits.get("additionalGids") or []:
        user = process.setdefault("user", {"uid": 0, "gid": 0})
        extra = user.setdefault("additionalGids", [])
        if gid not in extra:
            extra.append(gid)


def set_env(config: dict[str, Any], values: dict[str, str], *, replace: bool) -> None:
    """Set `values` in the config's process environment (only where unset unless `replace`)."""
    process = config.setdefault("process", {})
    present = {e.split("=", 1)[0] for e in process.get("env") or []}
    for name, value in values.items():
        if replace or name not in present:
            _set_env(process, f"{name}={value}")


def _set_env(process: dict[str, Any], entry: str) -> None:
    name = entry.split("=", 1)[0]
    env = [e for e in process.get("env") or [] if e.split("=", 1)[0] != name]
    env.append(entry)
    process["env"] = env


def _add_device(config: dict[str, Any], device: dict[str, Any], path: str, node: str) -> None:
    container_path = device.get("path")
    if not isinstance(container_path, str):
        raise CdiError(f"node {node}: {path}: a device node without a path")
    host_path = device.get("hostPath") or container_path
    try:
        st = os.stat(host_path)
    except OSError as exc:
        raise CdiError(f"node {node}: {path}: device {host_path}: {exc.strerror}") from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise CdiError(f"node {node}: {path}: {host_path} is not a device node")
    major = device.get("major", os.major(st.st_rdev))
    minor = device.get("minor", os.minor(st.st_rdev))
    # A bind mount of the node's device node, not a linux.devices entry: crun in a user
    # namespace (rootless, as Slurm's oci.conf runs it) makes those by bind mounts of the
    # same path anyway, and crun 1.8 run by a user other than root fails on them
    # ("unshare `CLONE_NEWNS`: Operation not permitted"). The cgroup rule still goes in.
    _add_mount(
        config,
        {"hostPath": host_path, "containerPath": container_path, "options": ["bind", "nosuid"]},
        path,
        node,
    )
    linux = config.setdefault("linux", {})
    rule = {
        "allow": True,
        "type": device.get("type", kind),
        "major": major,
        "minor": minor,
        "access": device.get("permissions", "rwm"),
    }
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    if rule not in rules:
        rules.append(rule)


def _add_mount(config: dict[str, Any], mount: dict[str, Any], path: str, node: str) -> None:
    source, destination = mount.get("hostPath"), mount.get("containerPath")
    if not isinstance(source, str) or not isinstance(destination, str):
        raise CdiError(f"node {node}: {path}: a mount without hostPath and containerPath")
    mounts = config.setdefault("mounts", [])
    mounts[:] = [m for m in mounts if m.get("destination") != destination]
    mounts.append(
        {
            "destination": destination,
            "type": mount.get("type") or "bind",
            "source": source,
            "options": list(mount.get("options") or ["bind"]),
        }
    )
