"""scrun.lua support: the `slurm` table, the hooks, staging. See api.py for the contract.

Only where the script lives is here: the anchor asks that on every `create`, and most
sites have no scrun.lua, so the answer must not import the rest of the package.
"""

import os

SCRIPT_NAME = "scrun.lua"


def find_script(slurm_conf_path: str) -> str:
    """scrun.lua lives beside the slurm.conf in use, where Slurm looks for all its other
    configuration files (oci.conf, cgroup.conf, ...)."""
    return os.path.join(os.path.dirname(slurm_conf_path), SCRIPT_NAME)
