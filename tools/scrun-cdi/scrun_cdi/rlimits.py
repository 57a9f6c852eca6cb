"""A container's resource limits (config.json's process.rlimits) as this node can give them.

The engine writes the limits on the login host, from its own: podman as root asks for
RLIMIT_NPROC 1048576 as soon as one `--ulimit` is given, and docker's `--ulimit` and daemon
defaults may ask above a node's limits too. crun sets each limit in the container, and
raising a hard limit above the one it inherited needs CAP_SYS_RESOURCE in the host's user
namespace: a runtime run as the job's user, or in a user namespace of its own, has not, and
crun then refuses the whole container (`setrlimit RLIMIT_NPROC: Operation not permitted`),
where on the engine's own host it ran.

So for each limit whose hard value is above this process's, the wrapper raises its own
(the runtime inherits it) where it may; where it may not, the container gets the node's
hard limit, its soft one lowered to fit, as rootless podman sets its default limits no
higher than the user's. A limit the node can give is left as it is. The node cannot tell
a limit the user asked for from the engine's defaults: one asked above what the node
gives runs with the node's, where crun on the engine's host would refuse it.
"""

from __future__ import annotations

import resource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# RLIM_INFINITY as config.json writes it (a uint64); values from 2**63 on mean it too here,
# as setrlimit(2) takes no larger finite value from Python
UNLIMITED = 2**64 - 1
_FINITE_BELOW = 2**63


def fit_to_node(config: dict[str, Any]) -> bool:
    """Lower, in `config`, the limits this node cannot raise to; True when any was."""
    process = config.get("process")
    limits = process.get("rlimits") if isinstance(process, dict) else None
    if not isinstance(limits, list):
        return False
    changed = False
    for limit in limits:
        kind = _resource(limit)
        if kind is None:
            continue
        own_soft, own_hard = resource.getrlimit(kind)
        ceiling = UNLIMITED if own_hard == resource.RLIM_INFINITY else own_hard
        wanted = UNLIMITED if limit["hard"] >= _FINITE_BELOW else limit["hard"]
        if wanted <= ceiling or _raise_own(kind, own_soft, wanted):
            continue
        limit["hard"] = ceiling
        limit["soft"] = min(limit["soft"], ceiling)
        changed = True
    return changed


def _resource(limit: object) -> int | None:
    """The RLIMIT_* constant of a well-formed limit; None for anything else (scrun checked
    the engine's config; the node's copy is Slurm's, and what crun makes of the rest is
    crun's)."""
    if not isinstance(limit, dict):
        return None
    name, soft, hard = limit.get("type"), limit.get("soft"), limit.get("hard")
    if not (isinstance(name, str) and name.startswith("RLIMIT_")):
        return None
    if not all(type(value) is int and value >= 0 for value in (soft, hard)):
        return None
    kind = getattr(resource, name, None)
    return kind if type(kind) is int else None


def _raise_own(kind: int, soft: int, hard: int) -> bool:
    """Raise this process's hard limit of `kind` to `hard` (its soft one kept), so that the
    runtime, its child, can set the container's; False when it may not."""
    try:
        resource.setrlimit(kind, (soft, resource.RLIM_INFINITY if hard == UNLIMITED else hard))
    except (OSError, ValueError):  # ValueError: not allowed to raise it
        return False
    return True
