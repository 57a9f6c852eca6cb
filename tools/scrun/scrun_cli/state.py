"""`scrun state ID`: print the container's OCI state JSON (from the spool, no Slurm call).

One line of JSON, as Slurm's own scrun prints it since 25.05 (24.11's was indented): a
script reading one line per call works the same with either scrun."""

from __future__ import annotations

import sys

from scrunlib import leanjson
from scrunlib.options import one_id, parse, usage_text
from scrunlib.state import ContainerState

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

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
    sys.stdout.write(leanjson.dumps(state.oci_state()) + "\n")
    return 0
