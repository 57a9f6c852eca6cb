"""set_root_path without the matching config.json change (a static heuristic).

slurm.set_root_path only tells scrun (for stage_out's root_path) where the rootfs now is;
the container runtime reads `root.path` from the config.json the script writes. A script
that moves the rootfs must also set `root.path` and serialise the config. The checker cannot
follow the data to the file, so it only looks for both ingredients somewhere in the script.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext

ENCODERS = ("encode", "to_json")  # json.encode, cjson.encode, slurm.to_json


def check_root_path(ctx: LintContext) -> None:
    calls = [call for call in ctx.calls() if ctx.slurm_function(call) == "set_root_path"]
    if not calls:
        return
    updated = any(sets_root_path(node) for node in ctx.all_nodes)
    encoded = any(is_encoder(node) for node in ctx.all_nodes)
    if updated and encoded:
        return
    if not updated:
        problem = "no assignment to root.path was found"
    else:
        problem = "root.path is set but the config is never serialised (no to_json/encode call)"
    for call in calls:
        ctx.report(
            call,
            "W804",
            f"slurm.set_root_path() does not edit config.json and {problem};"
            " the container would keep its old rootfs (static heuristic)",
        )


def sets_root_path(node: n.Node) -> bool:
    """`x.root.path = v`, `x["root"]["path"] = v` or a table `{root = {path = v}}`."""
    if isinstance(node, n.Index) and n.is_target(node):
        return n.static_string(node.key) == "path" and (
            isinstance(node.obj, n.Index) and n.static_string(node.obj.key) == "root"
        )
    if isinstance(node, n.TableField) and node.key is not None:
        inner = n.unparen(node.value)
        return (
            n.static_string(node.key) == "root"
            and isinstance(inner, n.Table)
            and any(
                entry.key is not None and n.static_string(entry.key) == "path"
                for entry in inner.entries
            )
        )
    return False


def is_encoder(node: n.Node) -> bool:
    if isinstance(node, n.Call) and isinstance(node.func, n.Index):
        return n.static_string(node.func.key) in ENCODERS
    return isinstance(node, n.MethodCall) and node.method in ENCODERS
