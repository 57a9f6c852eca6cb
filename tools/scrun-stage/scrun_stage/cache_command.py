"""scrun-stage cache list|verify|prune: the command over scrun_stage.cache (the scratch's
cache) and scrun_stage.node_cache (node-local.lua's copies on the nodes, with --nodes): its
options, what each action does with the caches it reads, and its reports."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from scrunlib.errors import UsageError

from scrun_stage import node_cache
from scrun_stage.cache import (
    OK,
    CacheError,
    Entry,
    Place,
    cache_dir,
    changed,
    entries,
    forget_gone,
    prune,
    setting_of,
    user_id,
)


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    """`scrun-stage cache list|verify|prune` and their options."""
    text = "list, verify or prune a user's image cache on the scratch (and on the nodes)"
    cache = commands.add_parser(
        "cache",
        help=text,
        description=f"{text[0].upper()}{text[1:]} (docs/scrun-lua's scripts: "
        "<scratch>/<uid>/scrun-cache; node-local.lua's copies on each node: "
        "<node_local>/scrun-<uid>/cache).",
        epilog=CACHE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--scratch",
        metavar="DIR",
        help="the scratch (default: the `scratch` setting of the site's scrun.lua)",
    )
    common.add_argument("--user", metavar="NAME|UID", help="another user's cache (root only)")
    common.add_argument(
        "--nodes",
        metavar="NODES|all",
        help="also node-local.lua's copies on these nodes (a Slurm node list; all: every node "
        "that responds, or every node of --job-id's job), read by a step on each",
    )
    common.add_argument(
        "--node-local",
        metavar="DIR",
        help="with --nodes: the nodes' directory (default: the `node_local` setting of the "
        "site's scrun.lua)",
    )
    common.add_argument(
        "--job-id",
        type=int,
        metavar="N",
        help="with --nodes: run the steps in this job of yours (default: $SLURM_JOB_ID; "
        "without one, in a job of their own)",
    )
    common.add_argument("--script", metavar="PATH", help="scrun.lua (default: beside slurm.conf)")
    common.add_argument("-f", "--slurm-conf", metavar="PATH", help="slurm.conf (as for `in`)")
    common.add_argument("--debug", action="store_true", help="an internal error's traceback")
    for name, help_text in (
        ("list", "each entry: key, size, last use, the containers using it, its state"),
        ("verify", "recompute each image's stamp; exit 1 naming those that changed"),
        ("prune", "remove the entries no container uses, least recently used first"),
    ):
        action = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        action.set_defaults(verbose=0)
        if name == "prune":
            action.add_argument(
                "--to-size",
                type=int,
                metavar="MIB",
                help="remove only until each cache holds at most MIB (default: all unused)",
            )


CACHE_EPILOG = """\
states:
  ok                 an imported image (`verify` checks it was not changed since; a node's
                     copy: since it was copied)
  changed            set aside by a script: it changed after its import (removed once unused)
  incomplete import  an import under way, or killed half way (never used)

nodes:
  With --nodes, each action reads node-local.lua's copies with one task on each node: in the
  job --job-id (or $SLURM_JOB_ID) names, or in a job of their own, for which srun waits at
  most a minute (busy nodes: use a job of yours that holds them). A node's cache whose
  directories are not the user's own (a link, another's) is not read.

exit status:
  0  done (verify: every image is as imported)
  1  verify found changed images (named on stderr), an entry could not be read or removed,
     or a node step failed
  2  usage error (no cache there, no scratch setting, --user without being root)
"""


def run(args: argparse.Namespace, script: str) -> tuple[str, int]:
    """The report for `args.action` on stdout, and the exit status."""
    uid = user_id(args.user)
    cache = cache_dir(args.scratch or setting_of(script, "scratch", "--scratch"), uid)
    try:
        places = [Place(str(cache), entries(cache))]
    except UsageError:  # (no cache on the scratch: the nodes may still have copies)
        if not args.nodes:
            raise
        places = [Place(str(cache), None)]
    nodes = None
    if args.nodes:
        node_local = args.node_local or node_cache.node_local_of(script)
        job_id = args.job_id if args.job_id is not None else _job_of_environment()
        steps = node_cache.steps_for(args.nodes, job_id, args.slurm_conf)
        places += node_cache.read(steps, node_local, uid, verify=args.action == "verify")
        nodes = (steps, node_local)
    if args.action == "list":
        return "".join(render(place) for place in places), 0
    unread = [f"not read {place.label}: {place.unread}" for place in places if place.unread]
    found = [entry for place in places for entry in place.entries or []]
    if args.action == "verify":
        return verify(found, unread), 0
    limit = None if args.to_size is None else args.to_size * 1024
    removed, in_use = prune(places[0].entries or [], limit)
    if places[0].entries is not None:
        forget_gone(cache)
    chosen = []
    for place in places[1:]:
        kept = prune(place.entries or [], limit, remove=lambda entry: True)
        chosen += kept[0]
        in_use += kept[1]
    if nodes is not None:
        removed += node_cache.remove(nodes[0], nodes[1], uid, chosen)
    lines = [f"removed  {e.path.name} ({_size(e.size_kib)}){_on(e)}" for e in removed]
    lines += [f"in use   {e.path.name} by {', '.join(e.users)}{_on(e)}" for e in in_use]
    return "".join(f"{line}\n" for line in lines + unread), 0


def verify(found: list[Entry], unread: list[str]) -> str:
    """verify's report; VerifyFailed naming the images changed after their import (a node's
    copy: after its copy), with the report."""
    bad = [e for e in found if e.state == OK and (e.copy_changed if e.node else changed(e))]
    lines = [f"{'CHANGED' if e in bad else e.state:<17} {e.key}{_on(e)}" for e in found]
    report = "".join(f"{line}\n" for line in lines + unread)
    if bad:
        names = ", ".join(f"{e.key}{_on(e)}" for e in bad)
        raise VerifyFailed(report, f"changed after their import: {names}")
    return report


def _job_of_environment() -> int | None:
    job = os.environ.get("SLURM_JOB_ID", "")
    return int(job) if job.isdigit() else None


def _on(entry: Entry) -> str:
    return f" on {entry.node}" if entry.node else ""


class VerifyFailed(CacheError):
    """verify's report, and the one line naming what changed."""

    def __init__(self, report: str, message: str) -> None:
        super().__init__(message)
        self.report = report


def render(place: Place) -> str:
    """A cache's table (`list`)."""
    if place.entries is None:
        return f"cache {place.label}: {f'not read: {place.unread}' if place.unread else 'none'}\n"
    found = place.entries
    lines = [f"cache {place.label}: {len(found)} entries, {_size(sum(e.size_kib for e in found))}"]
    lines.append(f"{'KEY':<64}  {'SIZE':>9}  {'LAST USE':<19}  {'STATE':<17}  IN USE BY")
    for entry in found:
        used = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.last_use))
            if entry.last_use is not None
            else "-"
        )
        lines.append(
            f"{entry.key:<64}  {_size(entry.size_kib):>9}  {used:<19}  {entry.state:<17}  "
            f"{', '.join(entry.users) or '-'}"
        )
    return "\n".join(lines) + "\n"


def _size(kib: int) -> str:
    return f"{kib / 1048576:.1f} GiB" if kib >= 1048576 else f"{(kib + 1023) // 1024} MiB"
