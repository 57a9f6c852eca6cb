"""`scrun list [-q] [--format table|json]`: the containers under the root, as runc lists
them, plus the Slurm job and nodes of each. Reads only the spool (no Slurm call)."""

from __future__ import annotations

import json
import os
import sys

from scrunlib import log
from scrunlib.errors import ScrunError, UsageError, reason
from scrunlib.options import Opt, parse, usage_text
from scrunlib.state import ContainerState

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

OPTIONS = (
    Opt("format", "f", value=True, metavar="FORMAT", help="table (default) or json"),
    Opt("quiet", "q", help="print only the container ids"),
)
USAGE = usage_text(
    "scrun list [-q] [--format table|json]",
    "List the containers under the root: id, pid (the anchor's), status, Slurm job id,\n"
    "the job's nodes, bundle, creation time and owner.",
    OPTIONS,
)
COLUMNS = ("ID", "PID", "STATUS", "JOBID", "NODES", "BUNDLE", "CREATED", "OWNER")


def containers(root: str) -> list[ContainerState]:
    """Every container with a readable state under `root`, oldest first. A container
    deleted while we look is simply not listed."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ScrunError(f"cannot read runtime root {root}: {reason(exc)}") from exc
    found = []
    for name in names:
        path = os.path.join(root, name, "state.json")
        if not os.path.isfile(path):
            continue  # a cache file (.slurm-version, .site-config), or a spool dir being removed
        try:
            found.append(ContainerState.load_file(path, name))
        except ScrunError as exc:
            log.verbose(f"list: skipping {name}: {exc.message}")
    return sorted(found, key=lambda state: (state.created, state.id))


def document(state: ContainerState) -> dict[str, Any]:
    """runc's list entry (the OCI state without annotations, plus owner), and scrun's
    jobId and nodes."""
    entry = state.oci_state()
    entry.pop("annotations", None)
    entry.pop("exitCode", None)
    entry["jobId"] = state.job_id
    entry["nodes"] = state.nodes
    return entry


def _nodes_or_reason(state: ContainerState, entry: dict[str, Any]) -> str:
    """The job's nodes; while it waits in the queue, `(Reason)` as squeue shows it."""
    if "jobState" in entry:
        return f"({entry.get('jobReason') or entry['jobState']})"
    return state.nodes or ""


def table(rows: list[list[str]]) -> str:
    """Columns as runc's tabwriter lays them out: at least 12 wide, 3 spaces apart."""
    widths = [max(12, *(len(row[i]) + 3 for row in rows)) for i in range(len(rows[0]) - 1)]
    lines = [
        "".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + row[-1]
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="list")
    if words:
        raise UsageError(f"list: unexpected argument {words[0]!r}")
    output_format = str(values.get("format", "table")).lower()
    if output_format not in ("table", "json"):
        raise UsageError(f"list: unknown format {output_format!r}: expected table or json")
    states = containers(ctx.root)
    if values.get("quiet"):
        sys.stdout.write("".join(f"{state.id}\n" for state in states))
    elif output_format == "json":
        sys.stdout.write(json.dumps([document(state) for state in states]) + "\n")
    else:
        rows = [list(COLUMNS)]
        for state in states:
            entry = document(state)
            rows.append(
                [
                    state.id,
                    str(entry["pid"]),
                    entry["status"],
                    "" if state.job_id is None else str(state.job_id),
                    _nodes_or_reason(state, entry),
                    state.bundle,
                    state.created,
                    state.owner,
                ]
            )
        sys.stdout.write(table(rows))
    return 0
