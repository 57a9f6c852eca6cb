"""`scrun version` / `scrun --version`: scrun's, the OCI spec's and Slurm's versions."""

from __future__ import annotations

import os
import sys

from scrunlib import OCI_VERSION, __version__
from scrunlib.errors import ScrunError
from scrunlib.options import parse, usage_text
from scrunlib.spool import SLURM_VERSION_CACHE

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

USAGE = usage_text("scrun version", "Print scrun's, the OCI spec's and Slurm's versions.", ())


def slurm_version(ctx: CommandContext) -> str:
    """The release of the Slurm scrun would use, as the anchor learns it (`srun --version`,
    kept in the runtime root's version cache when there is a usable root), or why not."""
    from scrunlib.slurm import Slurm  # only here: version is no command podman waits on
    from scrunlib.slurm_version import version_string

    try:
        cache: str | None = os.path.join(ctx.root, SLURM_VERSION_CACHE)
    except ScrunError:
        cache = None  # a root we may not use: ask srun, keep nothing
    try:
        return version_string(Slurm(ctx.site, ctx.slurm_conf, version_cache=cache).version())
    except ScrunError as exc:
        return f"unknown ({exc.message})"


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    parse(argv, (), USAGE, what="version")
    sys.stdout.write(
        f"scrun version {__version__}\nspec: {OCI_VERSION}\nslurm: {slurm_version(ctx)}\n"
    )
    return 0
