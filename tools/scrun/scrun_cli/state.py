"""`scrun state ID`: print the container's OCI state JSON (from the spool, no Slurm call)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from scrunlib.options import one_id, parse, usage_text
from scrunlib.state import ContainerState

from scrun_cli.context import CommandContext

USAGE = usage_text(
    "scrun state CONTAINER-ID",
    "Print the container's state as OCI state JSON: status is creating, created, running\n"
    "or stopped; pid is the anchor's (0 once stopped); jobId and exitCode are added.",
    (),
)


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    _, words = parse(argv, (), USAGE, what="state")
    (container_id,) = one_id(words, "state")
    state = ContainerState.load(ctx.spool(container_id))
    sys.stdout.write(json.dumps(state.oci_state(), indent=2) + "\n")
    return 0
