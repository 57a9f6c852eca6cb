"""The OCI bundle handed to `create`, and its config.json, validated before anything runs.

Also builds the bundle Slurm 22.05's slurmd can run: slurmd always uses `<bundle>/rootfs`
and ignores `root.path`, while podman's and docker's bundles point `root.path` elsewhere.
"""

from __future__ import annotations

import os

from scrunlib import leanjson, log
from scrunlib.errors import InvalidInput, reason
from scrunlib.files import remove_tree, write_atomically
from scrunlib.spool import dir_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_OCI_VERSION = "1.0.0"


class Bundle:
    """What scrun needs from a bundle: its path and the checked parts of config.json."""

    __slots__ = (
        "annotations",
        "args",
        "config",
        "config_file",
        "cwd",
        "env",
        "oci_version",
        "path",
        "rootfs",
        "terminal",
    )

    def __init__(
        self,
        *,
        path: str,
        config: dict[str, Any],
        config_file: str,
        rootfs: str,
        args: tuple[str, ...],
        env: tuple[str, ...],
        cwd: str,
        terminal: bool,
        oci_version: str,
        annotations: dict[str, str],
    ) -> None:
        self.path, self.config, self.rootfs = path, config, rootfs  # rootfs: absolute
        self.config_file = config_file  # <path>/config.json unless crun's --config chose another
        self.args, self.env, self.cwd, self.terminal = args, env, cwd, terminal
        self.oci_version, self.annotations = oci_version, annotations

    @property
    def own_config(self) -> bool:
        """Whether config.json is the bundle's own (slurmd reads only that one)."""
        return self.config_file == os.path.join(self.path, "config.json")


def load(path: str, config_file: str | None = None) -> Bundle:
    """Read and validate `<path>/config.json`, or `config_file` instead (crun's --config:
    relative to the bundle); every problem is one clear InvalidInput."""
    path = os.path.abspath(path)
    config_file = os.path.join(path, config_file or "config.json")
    if not os.path.isdir(path):
        raise InvalidInput(f"bundle {path} is not a directory")
    try:
        with open(config_file, encoding="utf-8") as stream:
            config = leanjson.loads(stream.read())
    except FileNotFoundError:
        if os.path.dirname(config_file) == path:
            name = os.path.basename(config_file)
            raise InvalidInput(f"bundle {path} has no {name}") from None
        raise InvalidInput(f"config file {config_file} does not exist") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {config_file}: {reason(exc)}") from exc
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        raise InvalidInput(f"{config_file} is not valid JSON: {exc}") from exc
    return parse(path, config, config_file)


def with_config(bundle: Bundle, config: dict[str, Any], config_file: str) -> Bundle:
    """`bundle` run with `config` instead of its own, written to `config_file` (outside the
    bundle, which is the engine's), as crun's --config would name it."""
    try:
        write_atomically(config_file, leanjson.dumps(config))
    except OSError as exc:
        raise InvalidInput(f"cannot write {config_file}: {reason(exc)}") from exc
    return parse(bundle.path, config, config_file)


def _expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise InvalidInput(f"config.json: {where} must be {what}")
    return value


def _encodable(value: str) -> bool:
    """Whether UTF-8 can hold `value`: JSON's `\\ud800` decodes to an unpaired surrogate,
    which no file, command line or environment can take."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _expect_text(value: Any, where: str) -> str:
    """A string that can reach a command line, a file or an environment."""
    text = _expect(value, str, where, "a string")
    if "\0" in text or not _encodable(text):
        raise InvalidInput(f"config.json: {where} holds a NUL or an unpaired surrogate")
    return text  # type: ignore[no-any-return]


def parse(path: str, config: Any, config_file: str | None = None) -> Bundle:
    _expect(config, dict, "the top level", "an object")
    version = _expect_text(config.get("ociVersion", DEFAULT_OCI_VERSION), "ociVersion")
    root = _expect(config.get("root"), dict, "root", "an object")
    root_path = _expect_text(root.get("path"), "root.path")
    if not root_path:
        raise InvalidInput("config.json: root.path is empty")
    process = _expect(config.get("process"), dict, "process", "an object")
    args = _expect(process.get("args"), list, "process.args", "a list of strings")
    if not args or not all(isinstance(arg, str) for arg in args):
        raise InvalidInput("config.json: process.args must be a non-empty list of strings")
    env = _expect(process.get("env", []), list, "process.env", "a list of strings")
    if not all(isinstance(entry, str) for entry in env):
        raise InvalidInput("config.json: process.env must be a list of strings")
    for where, texts in (("process.args", args), ("process.env", env)):
        for index, text in enumerate(texts):
            _expect_text(text, f"{where}[{index}]")
    cwd = _expect_text(process.get("cwd", "/"), "process.cwd")
    if not cwd.startswith("/"):
        raise InvalidInput("config.json: process.cwd must be an absolute path")
    terminal = _expect(process.get("terminal", False), bool, "process.terminal", "a boolean")
    if "user" in process:
        _check_user(process["user"])
    _check_rlimits(process.get("rlimits", []))
    _check_mounts(config.get("mounts", []))
    _check_namespaces(config.get("linux"))
    annotations = _expect(config.get("annotations", {}), dict, "annotations", "an object")
    if not all(isinstance(value, str) for value in annotations.values()):
        raise InvalidInput("config.json: annotations values must be strings")
    # (a NUL is let through: such an annotation is left out of the job environment)
    if not all(_encodable(key) and _encodable(value) for key, value in annotations.items()):
        raise InvalidInput("config.json: an annotation holds an unpaired surrogate")
    return Bundle(
        path=path,
        config=config,
        config_file=config_file or os.path.join(path, "config.json"),
        rootfs=os.path.normpath(os.path.join(path, root_path)),
        args=tuple(args),
        env=tuple(env),
        cwd=cwd,
        terminal=terminal,
        oci_version=version,
        annotations=dict(annotations),
    )


# The runtime-spec's uid_t, gid_t and umask: unsigned 32-bit.
_ID_LIMIT = 1 << 32


def _check_user(user: Any) -> None:
    """process.user's numbers are unsigned 32-bit integers (uid, gid, umask, additionalGids),
    as the runtime on the node reads them: a -1 there failed only after the job was granted
    and staged."""
    _expect(user, dict, "process.user", "an object")
    ids = [(f"process.user.{key}", user[key]) for key in ("uid", "gid", "umask") if key in user]
    additional = _expect(
        user.get("additionalGids", []), list, "process.user.additionalGids", "a list of ids"
    )
    ids += [(f"process.user.additionalGids[{n}]", gid) for n, gid in enumerate(additional)]
    for where, number in ids:
        _expect_unsigned(number, _ID_LIMIT, where)


def _expect_unsigned(value: Any, limit: int, where: str) -> int:
    """An integer from 0 to `limit` - 1 (the runtime-spec's unsigned fields)."""
    what = f"an integer from 0 to {limit - 1}"
    if not 0 <= _expect(value, int, where, what) < limit:
        raise InvalidInput(f"config.json: {where} must be {what}")
    return int(value)


# The resource limits Linux has (setrlimit(2)): the runtime-spec's process.rlimits types.
RLIMIT_TYPES = frozenset(
    f"RLIMIT_{name}"
    for name in (
        "AS", "CORE", "CPU", "DATA", "FSIZE", "LOCKS", "MEMLOCK", "MSGQUEUE", "NICE",
        "NOFILE", "NPROC", "RSS", "RTPRIO", "RTTIME", "SIGPENDING", "STACK",
    )
)  # fmt: skip
_RLIMIT_LIMIT = 1 << 64  # soft and hard: unsigned 64-bit


def _check_rlimits(rlimits: Any) -> None:
    """process.rlimits as Linux can set them: each a known RLIMIT_* type with unsigned 64-bit
    `soft` and `hard`, soft at most hard. The runtime on the node refuses any other, but
    only once the job was granted and staged (the OCI runtime spec: an error at create)."""
    _expect(rlimits, list, "process.rlimits", "a list of objects")
    for index, rlimit in enumerate(rlimits):
        where = f"process.rlimits[{index}]"
        _expect(rlimit, dict, where, "an object")
        kind = rlimit.get("type")
        if not isinstance(kind, str) or kind not in RLIMIT_TYPES:
            raise InvalidInput(f"config.json: {where}.type {kind!r} is not a Linux resource limit")
        soft = _expect_unsigned(rlimit.get("soft"), _RLIMIT_LIMIT, f"{where}.soft")
        hard = _expect_unsigned(rlimit.get("hard"), _RLIMIT_LIMIT, f"{where}.hard")
        if soft > hard:
            raise InvalidInput(f"config.json: {where}: soft {soft} is above hard {hard}")


def _check_mounts(mounts: Any) -> None:
    """The runtime-spec's shape of `mounts`: a list of objects, each with a string
    `destination` (required), and `source`, `type` strings and `options` a list of strings
    when present. scrun.lua's staging reads them (a missing destination failed there as
    "table index is nil"), and the runtime on the node refuses them after the job."""
    _expect(mounts, list, "mounts", "a list of objects")
    for index, mount in enumerate(mounts):
        where = f"mounts[{index}]"
        _expect(mount, dict, where, "an object")
        if "destination" not in mount:
            raise InvalidInput(f"config.json: {where} has no destination")
        _expect_text(mount["destination"], f"{where}.destination")
        for key in ("source", "type"):
            if key in mount:
                _expect_text(mount[key], f"{where}.{key}")
        options = _expect(mount.get("options", []), list, f"{where}.options", "a list of strings")
        for number, option in enumerate(options):
            _expect_text(option, f"{where}.options[{number}]")


# Where podman keeps the network namespaces it makes (its bridge and pasta networks): one
# file per container, `netns-<uuid>`, under /run/netns (root) or $XDG_RUNTIME_DIR/netns.
PODMAN_NETNS_PREFIX = "netns-"


# The namespace types Linux has: the runtime-spec's linux.namespaces types.
NAMESPACE_TYPES = frozenset(("cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"))


def _check_namespaces(linux: Any) -> None:
    """`linux` as the runtime-spec shapes it (an object; its namespaces a list of objects,
    each a known `type` and an optional string `path`), since the node's runtime refuses
    any other only once the job was granted and staged. A namespace with a `path` is one
    to join, and such paths name this host's: another process's (`/proc/<pid>/ns/...`: a
    pod's, `--network container:...`, `--ipc container:...`) or the network podman set up
    here (its bridge or pasta). On a compute node the first is missing or, worse, some
    other process's, and the second does not exist: the step would fail after the job was
    granted and staged, or join the wrong namespace. Other paths (a namespace a site keeps
    on every node) are left to the node's runtime."""
    if linux is None:
        return
    _expect(linux, dict, "linux", "an object")
    namespaces = _expect(linux.get("namespaces", []), list, "linux.namespaces", "a list")
    for index, entry in enumerate(namespaces):
        _expect(entry, dict, f"linux.namespaces[{index}]", "an object")
        kind = entry.get("type")
        if not isinstance(kind, str) or kind not in NAMESPACE_TYPES:
            raise InvalidInput(
                f"config.json: linux.namespaces[{index}].type {kind!r} is not a Linux namespace"
            )
        if "path" not in entry:
            continue
        path = _expect_text(entry["path"], f"linux.namespaces[{index}].path")
        where = f"config.json: linux.namespaces[{index}]"
        if path.startswith("/proc/"):
            raise InvalidInput(
                f"{where} joins the {kind} namespace of another process on this host ({path}:"
                " a pod's, or --network/--ipc/--pid container:...); each container is a Slurm"
                " job of its own on a compute node and cannot share another's"
            )
        if kind == "network" and os.path.basename(path).startswith(PODMAN_NETNS_PREFIX):
            raise InvalidInput(
                f"{where} is podman's network namespace {path}, which only this host has:"
                " Slurm jobs have no container networks; run with --network host"
                ' (containers.conf: netns = "host") or --network none'
            )


# Slurm 22.05 forces process.terminal=false, so under `srun --pty` the container's stdio is
# the pty slurmstepd made on the node. It lives in the node's /dev/pts, so that is what the
# container needs to see for `tty` to name it. (Newer Slurm passes the terminal on and the
# runtime makes the pty in the container's own /dev/pts: the node's would not do there, as
# its ptmx, mode 000, is closed to a rootless runtime.)
HOST_PTS_MOUNT = {
    "destination": "/dev/pts",
    "type": "bind",
    "source": "/dev/pts",
    "options": ["rbind", "nosuid", "noexec"],
}


def _hooks_for_nodes(hooks: dict[str, Any]) -> dict[str, Any]:
    """Drop hooks that name a process of the submitting host (docker's prestart
    `/proc/<dockerd pid>/exe libnetwork-setkey`): on a compute node that pid is missing, or
    worse, another program. Malformed entries are kept: the node's runtime rejects them."""
    kept: dict[str, Any] = {}
    for stage, entries in hooks.items():
        if not isinstance(entries, list):
            kept[stage] = entries
            continue
        local = [
            e for e in entries if isinstance(e, dict) and str(e.get("path")).startswith("/proc/")
        ]
        for entry in local:
            log.debug(f"not running the {stage} hook {entry.get('path')} on the compute node")
        kept[stage] = [e for e in entries if e not in local]
    return kept


class NodeBundle:
    """What the container's step runs: the bundle path slurmd gets and the command line,
    its program as an absolute path inside the rootfs."""

    __slots__ = ("args", "path")

    def __init__(self, path: str, args: tuple[str, ...]) -> None:
        self.path, self.args = path, args


def node_args(staged: Bundle) -> tuple[str, ...]:
    """process.args with args[0] found as the OCI runtime would find it. Unchanged when
    the rootfs is not readable here (staged where only the nodes see it) or has no such
    program (it may come from a mount): the runtime on the node then decides."""
    from scrunlib import executable

    name = staged.args[0]
    if "/" not in name and not os.path.isdir(staged.rootfs):
        log.verbose(f"rootfs {staged.rootfs} is not readable here: {name} left to the node")
        return staged.args
    view = executable.RootView(staged.rootfs, executable.config_mounts(staged.config))
    found = executable.find(view, name, staged.env, staged.cwd)
    if found is None:
        log.verbose(f"{name} is not in the container's PATH inside {staged.rootfs}")
        return staged.args
    return (found, *staged.args[1:])


def node_copy_dir(bundle_path: str, container_id: str) -> str:
    """Where runnable_by_slurm writes the bundle slurmd runs when the given one will not do:
    inside the bundle itself. The compute nodes can read it wherever they can read the
    bundle; the runtime root (e.g. /run/user/<uid>/scrun) is the login host's own."""
    return os.path.join(bundle_path, ".scrun-" + dir_name(container_id))


def runnable_by_slurm(
    bundle_path: str, target_dir: str, *, node_pty: bool = False, config_file: str | None = None
) -> NodeBundle:
    """The bundle slurmd (22.05 and newer) runs with the intended rootfs, and its command.

    If `<bundle>/rootfs` already is the configured root, config.json is the one to run (not
    crun's --config `config_file`) and the container's stdio is not the node's pty
    (`node_pty`, above HOST_PTS_MOUNT), the bundle is used as it is. Otherwise `target_dir`
    gets a copy of the config with an absolute root.path and a `rootfs` symlink to it."""
    staged = load(bundle_path, config_file)
    args = node_args(staged)
    own_rootfs = os.path.join(staged.path, "rootfs")
    same_root = os.path.realpath(own_rootfs) == os.path.realpath(staged.rootfs)
    if not node_pty and same_root and staged.own_config:
        return NodeBundle(staged.path, args)
    try:
        return _write_node_bundle(staged, args, target_dir, node_pty=node_pty)
    except OSError as exc:  # an unwritable spool, a root.path longer than a link can hold
        raise InvalidInput(
            f"cannot write the bundle the nodes run in {target_dir}: {reason(exc)}"
        ) from exc


def _write_node_bundle(
    staged: Bundle, args: tuple[str, ...], target_dir: str, *, node_pty: bool
) -> NodeBundle:
    """`target_dir` becomes the bundle for slurmd (see runnable_by_slurm)."""
    os.makedirs(target_dir, mode=0o755, exist_ok=True)
    config = dict(staged.config)
    config["root"] = {**config["root"], "path": staged.rootfs}
    # The caller's cgroup (podman's libpod-<id>) means nothing on a compute node, and tasks
    # of one step sharing it kill each other when the first ends; Slurm places the step.
    linux = config.get("linux")
    if isinstance(linux, dict) and "cgroupsPath" in linux:
        config["linux"] = {k: v for k, v in linux.items() if k != "cgroupsPath"}
    if isinstance(config.get("hooks"), dict):
        config["hooks"] = _hooks_for_nodes(config["hooks"])
    if node_pty:
        mounts = config.get("mounts")
        mounts = mounts if isinstance(mounts, list) else []
        mounts = [
            m for m in mounts if not isinstance(m, dict) or m.get("destination") != "/dev/pts"
        ]
        config["mounts"] = [*mounts, HOST_PTS_MOUNT]
    write_atomically(os.path.join(target_dir, "config.json"), leanjson.dumps(config))
    link = os.path.join(target_dir, "rootfs")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(staged.rootfs, link)
    return NodeBundle(target_dir, args)


def remove_node_copy(node_bundle: NodeBundle, bundle_path: str) -> None:
    """Remove what runnable_by_slurm wrote for `bundle_path`, if anything (before stage-out:
    it lives inside the staged bundle)."""
    if os.path.normpath(node_bundle.path) != os.path.normpath(bundle_path):
        remove_tree(node_bundle.path)
