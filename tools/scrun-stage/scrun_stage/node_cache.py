"""scrun-stage cache --nodes: the copies of images that node-local.lua keeps on the compute
nodes, `<node_local>/scrun-<uid>/cache/<key>/`: entries as on the scratch (scrun_stage.cache),
each with `stamp`, the scratch entry's it was copied from, and `node-stamp`, its own, taken
when it was copied (verify recomputes it).

Only a node sees its files, so each action reads them with a step there: one task on each
node named, `srun` composed with plumbum and run through scrunlib.processes, with exactly the
environment scrun gives Slurm's commands (slurm.conf, no Slurm input variables of the
caller's). The steps run in a job of the caller's (--job-id, else $SLURM_JOB_ID), or in one
of their own that srun allocates and ends, waiting at most ALLOCATION_SECONDS for the nodes
(`srun --immediate`: no job is left queued). A node's shell prints a line for each entry;
this side decides (prune's choice is cache.prune's, least recently used first, per node),
and a second step removes what it chose, each entry under its key's lock and only while no
container marks it, as the scripts remove one. As root, for another user (--user), a cache
whose directories are not that user's own (a link, another's) is not read.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from plumbum import local
from scrunlib import siteconfig
from scrunlib.errors import UsageError
from scrunlib.ownership import check_job_owner
from scrunlib.slurm import Slurm
from scrunlib.slurm_commands import command_environment

from scrun_stage.cache import (
    Entry,
    Place,
    least_recently_used,
    run_command,
    setting_of,
    state_of,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from plumbum.commands.base import BaseCommand

# How long a job of scrun-stage's own waits for its nodes before srun gives up.
ALLOCATION_SECONDS = 60

# What each node's step starts with: its cache (checked: the user's own directories, not
# links), the node's name, and `stamp DIR` as the scripts take it (docs/scrun-lua's
# stamp_command), its listing in a directory of its own rather than in the user's.
_NODE_PRELUDE = """\
node=${SLURMD_NODENAME:-$(hostname)}
for dir in "${cache%/*}" "$cache"; do
	[ -d "$dir" ] || { printf 'NONE\\t%s\\n' "$node"; exit 0; }
	if [ -L "$dir" ] || [ "$(stat -c %u -- "$dir")" != "$uid" ]; then
		printf 'UNSAFE\\t%s\\t%s\\n' "$node" "$dir"
		exit 0
	fi
done
cd -- "$cache" || exit 1
work=$(mktemp -d) || exit 1
trap 'rm -rf -- "$work"' EXIT
stamp() { (cd "$1" && find . -printf '%P\\t%C@ %s\\0') >"$work/listing" && \
LC_ALL=C sort -z "$work/listing" | sha256sum | cut -d' ' -f1; }
"""

# A line for each entry: ENTRY, node, name, KiB, last use (seconds; - never), whether its
# files are as copied (verify: same or changed; - not checked), the containers using it.
_LIST = """\
for name in *; do
	[ -d "$name" ] && [ ! -L "$name" ] || continue
	kib=$(du -sk -- "$name") || exit 1
	used=$(stat -c %Y -- "$name/used" 2>/dev/null) || used=-
	users=$(ls -A -- "$name/users" 2>/dev/null | tr '\\n' ' ')
	verdict=-
	case $verify:$name in
	1:*[!0-9a-f]*) ;;
	1:*)
		verdict=changed
		[ "$(stamp "$name/rootfs")" != "$(cat -- "$name/node-stamp" 2>/dev/null)" ] || verdict=same
		;;
	esac
	printf 'ENTRY\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "$node" "$name" "${kib%%[!0-9]*}" "$used" \
"$verdict" "$users"
done
"""

# Removes the entries chosen for this node (`set -- NAME LOCK...`, by its name), each
# under its lock and only while no container marks it: REMOVED, node, name.
_REMOVE = """\
while [ $# -gt 1 ]; do
	name=$1 lock=$2
	shift 2
	[ -d "$name" ] && [ ! -L "$name" ] && [ -f "$lock" ] || continue
	(
		flock -n 9 || exit 0
		[ -z "$(ls -A -- "$name/users" 2>/dev/null)" ] || exit 0
		# (an image's read-only directories with files in them: made writable first)
		if ! rm -rf -- "$name" 2>/dev/null; then
			chmod -R u+rwX -- "$name" && rm -rf -- "$name" || exit 1
		fi
		printf 'REMOVED\\t%s\\t%s\\n' "$node" "$name"
	) 9<"$lock" || exit 1
done
"""


@dataclass
class Steps:
    """Where the node steps run: `nodes` (a Slurm node list), in `job_id` or in a job of
    their own; `srun` with exactly `env`."""

    srun: str
    env: dict[str, str]
    nodes: str
    job_id: int | None

    def command(self, script: str) -> BaseCommand:
        """`/bin/sh -c SCRIPT` as one task on each node, composed for plumbum."""
        where = ["--overlap", f"--jobid={self.job_id}"] if self.job_id is not None else [
            f"--immediate={ALLOCATION_SECONDS}",
            "--job-name=scrun-stage-cache",
        ]  # fmt: skip
        options = [*where, f"--nodelist={self.nodes}", "--ntasks-per-node=1", "--quiet"]
        return local["env"]["-i", *_assignments(self.env), self.srun, *options, "--"][
            "/bin/sh", "-c", script
        ]

    def run(self, script: str, what: str) -> str:
        return run_command(self.command(script), what)


def _assignments(env: Mapping[str, str]) -> list[str]:
    return [f"{name}={value}" for name, value in env.items()]


def node_local_of(script: str) -> str:
    """Where the site's node-local.lua keeps its copies on each node (`local node_local`)."""
    return setting_of(script, "node_local", "--node-local")


def node_cache_dir(node_local: str, uid: int) -> Path:
    return Path(node_local) / f"scrun-{uid}" / "cache"


def steps_for(nodes: str, job_id: int | None, slurm_conf_option: str | None) -> Steps:
    """The steps' srun, environment and node list: `nodes` as given, or for `all` every node
    of `job_id` (which must be the caller's) or, without one, every node Slurm lists that
    responds."""
    site = siteconfig.load()
    slurm_conf = site.slurm_conf_path(slurm_conf_option, os.environ)
    env = command_environment(os.environ, {"SLURM_CONF": slurm_conf})
    if job_id is not None:
        record = Slurm(site, slurm_conf).job_record(job_id)
        check_job_owner(job_id, record)
        if nodes == "all":
            nodes = record.get("NodeList", "")
    elif nodes == "all":
        sinfo = local["env"]["-i", *_assignments(env), site.command("sinfo")]
        listed = run_command(sinfo["-h", "-N", "-r", "-o", "%N"], "listing the nodes")
        nodes = ",".join(dict.fromkeys(listed.split()))
    if not nodes or nodes == "(null)":
        raise UsageError("no node to read the caches on")
    return Steps(site.command("srun"), env, nodes, job_id)


def read(steps: Steps, node_local: str, uid: int, verify: bool) -> list[Place]:
    """Each node's cache of `uid`'s, as its step lists it (verify: each copy's stamp
    recomputed there, `Entry.copy_changed`), by node name."""
    cache = node_cache_dir(node_local, uid)
    script = _script(cache, uid, f"verify={int(verify)}\n" + _LIST)
    places: dict[str, Place] = {}
    for line in steps.run(script, "reading the nodes' caches").splitlines():
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        label = f"{fields[0]}:{cache}"
        if kind == "NONE":
            places[fields[0]] = Place(label, None)
        elif kind == "UNSAFE" and len(fields) == 2:
            unread = f"{fields[1]} is not the user's own directory (a link, or another's)"
            places[fields[0]] = Place(label, None, unread)
        elif kind == "ENTRY" and len(fields) == 6:
            entries = places.setdefault(fields[0], Place(label, [])).entries
            entry = _entry(cache, fields)
            if entry is not None and entries is not None:
                entries.append(entry)
    for place in places.values():
        (place.entries or []).sort(key=least_recently_used)
    return [places[node] for node in sorted(places)]


def _entry(cache: Path, fields: list[str]) -> Entry | None:
    """An entry from its line's fields (node, name, KiB, last use, verdict, users); None for
    a directory that is not one."""
    node, name, kib, used, verdict, users = fields
    state, key = state_of(name)
    if state is None or not kib.isdigit():
        return None
    last_use = float(used) if used.isdigit() else None
    return Entry(
        cache / name, key, state, int(kib), last_use, sorted(users.split()), node,
        copy_changed=verdict == "changed",
    )  # fmt: skip


def remove(steps: Steps, node_local: str, uid: int, chosen: list[Entry]) -> list[Entry]:
    """Remove the `chosen` entries, on their nodes (one step on those nodes): those whose
    lock is free and that no container marked meanwhile. Returns those removed."""
    by_node: dict[str, list[str]] = {}
    for entry in chosen:
        by_node.setdefault(entry.node or "", []).extend([entry.path.name, entry.lock.name])
    if not by_node:
        return []
    cases = "".join(
        f"{shlex.quote(node)}) set -- {shlex.join(names)} ;;\n" for node, names in by_node.items()
    )
    body = f"case $node in\n{cases}*) set -- ;;\nesac\n{_REMOVE}"
    script = _script(node_cache_dir(node_local, uid), uid, body)
    nodes = dataclasses.replace(steps, nodes=",".join(by_node))
    removed = {
        tuple(line.split("\t")[1:3])
        for line in nodes.run(script, "removing from the nodes' caches").splitlines()
        if line.startswith("REMOVED\t")
    }
    return [entry for entry in chosen if (entry.node, entry.path.name) in removed]


def _script(cache: Path, uid: int, body: str) -> str:
    return f"cache={shlex.quote(str(cache))} uid={uid}\n{_NODE_PRELUDE}{body}"
