"""`scrun version` / `scrun --version`: scrun's, the OCI spec's and Slurm's versions."""

from __future__ import annotations

import subprocess
import sys

from scrunlib import OCI_VERSION, __version__
from scrunlib.errors import ScrunError
from scrunlib.options import parse, usage_text

from scrun_cli.context import CommandContext

TYPE_CHECKING = False  # collections.abc costs ~2 ms on every call
if TYPE_CHECKING:
    from collections.abc import Sequence

USAGE = usage_text("scrun version", "Print scrun's, the OCI spec's and Slurm's versions.", ())


def slurm_version(ctx: CommandContext) -> str:
    """`srun --version` of the Slurm scrun would use, or why it cannot be found."""
    try:
        srun = ctx.site.command("srun")
        done = subprocess.run(
            [srun, "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
            env={"SLURM_CONF": ctx.slurm_conf},
        )
    except ScrunError as exc:
        return f"unknown ({exc.message})"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    words = done.stdout.split()
    return words[-1] if done.returncode == 0 and words else "unknown"


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    parse(argv, (), USAGE, what="version")
    sys.stdout.write(
        f"scrun version {__version__}\nspec: {OCI_VERSION}\nslurm: {slurm_version(ctx)}\n"
    )
    return 0
