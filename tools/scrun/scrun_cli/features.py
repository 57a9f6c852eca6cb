"""`scrun features`: what this runtime supports, as the JSON document runc 1.1+ and crun
print (the OCI runtime-spec's "features" structure).

A field scrun cannot vouch for is left out, which the spec defines as "unknown": mount
options, namespaces, capabilities, seccomp and the like are the compute node's OCI runtime's
(oci.conf), not scrun's. What scrun itself decides is stated.
"""

from __future__ import annotations

import json
import sys

from scrunlib import OCI_VERSION, __version__
from scrunlib.errors import UsageError
from scrunlib.options import parse, usage_text

from scrun_cli.context import CommandContext
from scrun_cli.main import COMMANDS, NOT_SUPPORTED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

USAGE = usage_text(
    "scrun features",
    "Print the features scrun supports as JSON (the OCI runtime-spec's features document).",
    (),
)
# config.json hooks go to the node's runtime (but those naming a /proc/<pid> of this host).
HOOKS = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")


def document() -> dict[str, Any]:
    return {
        "ociVersionMin": "1.0.0",
        "ociVersionMax": OCI_VERSION,
        "hooks": list(HOOKS),
        "linux": {
            # idmapped mounts need the node's runtime and kernel; scrun cannot promise them
            "mountExtensions": {"idmap": {"enabled": False}},
        },
        "annotations": {
            "org.opencontainers.runc.checkpoint.enabled": "false",
            "io.scrun.version": __version__,
            "io.scrun.commands": ",".join(sorted(COMMANDS)),
            "io.scrun.unsupported-commands": ",".join(sorted(NOT_SUPPORTED)),
            "io.scrun.process": "runs as a Slurm job step: srun --container on the job's nodes",
            "io.scrun.linux.cgroupsPath": "ignored: Slurm places the container's step",
            "io.scrun.hooks": "run on the compute node by the OCI runtime of oci.conf",
        },
    }


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    _, words = parse(argv, (), USAGE, what="features")
    if words:
        raise UsageError(f"features: unexpected argument {words[0]!r}")
    sys.stdout.write(json.dumps(document(), indent=2) + "\n")
    return 0
