"""Why a container's step failed on its nodes, when the cause is the site's layout.

The compute nodes are other hosts: they cannot read the login host's container storage,
its /run or its /tmp. A bundle there makes slurmstepd fail the launch ("Task launch ...
failed on node n1: No such file or directory"), and a node without the user's
/run/user/<uid> makes crun fail ("create directory `/run/user/1000`"): messages that do not
say what to change. After a step that failed soon after its start, the anchor runs this
check on the job's nodes (one task each, as the user) and says in one line what a node
cannot see, and what fixes it. A step that ran for a while or succeeded costs nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# A step that ends with an error within this many seconds of its start may never have
# launched its container; one that ran longer did.
LAUNCH_WINDOW = 5.0
# What oci.conf must name for a missing /run/user/<uid> to matter to its runtime.
RUNTIME_DIR_PREFIX = "/run/user/"

_BUNDLE, _ROOTFS, _RUNTIME_DIR = "bundle", "rootfs", "runtime-dir"


def check_script(bundle: str, rootfs: str, *, runtime_dir: bool) -> str:
    """sh script printing `<node> <problem> [path]` for what this node cannot see."""
    import shlex  # only on this failure path: shlex imports re

    node = '"${SLURMD_NODENAME:-$(hostname)}"'
    lines = [
        f"[ -r {shlex.quote(bundle)}/config.json ] || echo {node} {_BUNDLE}",
        f"[ -d {shlex.quote(rootfs)}/ ] || echo {node} {_ROOTFS}",
    ]
    if runtime_dir:
        lines.append(
            f'd=/run/user/$(id -u); [ -d "$d" ] || echo {node} {_RUNTIME_DIR} "$d"',
        )
    return "\n".join([*lines, "true"])


def uses_runtime_dir(oci_conf_text: str) -> bool:
    """Whether oci.conf's runtime keeps its state under /run/user/<uid> (crun's --root)."""
    return RUNTIME_DIR_PREFIX in oci_conf_text


def diagnosis(output: str, bundle: str, rootfs: str) -> str | None:
    """One line saying what the nodes could not see, from check_script's output; None when
    they saw everything (the failure was the container's own)."""
    found: dict[str, list[str]] = {}
    runtime_dirs: set[str] = set()
    for line in output.splitlines():
        words = line.split()
        if len(words) < 2:
            continue
        found.setdefault(words[1], []).append(words[0])
        if words[1] == _RUNTIME_DIR and len(words) > 2:
            runtime_dirs.add(words[2])
    shared_hint = (
        "it is on a filesystem only this host sees: stage containers to the nodes with a "
        "scrun.lua beside slurm.conf, or keep them on a filesystem the nodes share"
    )
    if _BUNDLE in found:
        return (
            f"{_nodes(found[_BUNDLE])} cannot read the container's bundle {bundle}: " + shared_hint
        )
    if _ROOTFS in found:
        return (
            f"{_nodes(found[_ROOTFS])} cannot read the container's root filesystem {rootfs}: "
            + shared_hint
        )
    if _RUNTIME_DIR in found:
        where = ", ".join(sorted(runtime_dirs)) or "/run/user/<uid>"
        return (
            f"{_nodes(found[_RUNTIME_DIR])} {'have' if len(found[_RUNTIME_DIR]) > 1 else 'has'} "
            f"no {where}, the user's runtime directory, where oci.conf keeps the containers: "
            "the nodes must make it (loginctl enable-linger, or a tmpfiles or PAM rule)"
        )
    return None


def _nodes(names: Sequence[str]) -> str:
    unique = sorted(set(names))
    return ("node " if len(unique) == 1 else "nodes ") + ",".join(unique)
