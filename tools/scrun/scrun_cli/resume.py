"""`scrun resume ID`: thaw what `scrun pause` froze (see scrun_cli.pause)."""

from __future__ import annotations

from scrunlib.state import Status

from scrun_cli.context import CommandContext
from scrun_cli.pause import change

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    return change(ctx, argv, Status.RUNNING)
