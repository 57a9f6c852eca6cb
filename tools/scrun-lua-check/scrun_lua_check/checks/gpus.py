"""job_env's GPU fields (W807). scrun.lua runs on the login host, before the container's
step exists: which GPUs the step gets is decided on its node at launch (SLURM_STEP_GPUS,
CUDA_VISIBLE_DEVICES, ... are set there, and scrun-cdi-run gives the container its devices
from the node's CDI spec). A script that reads them from `job_env` reads nil.
"""

from __future__ import annotations

from scrunlib.lua import api

from scrun_lua_check import nodes as n
from scrun_lua_check.context import LintContext

# Set for the step on its node; never in the job environment scrun.lua sees
STEP_GPU_FIELDS = frozenset(
    {
        "SLURM_STEP_GPUS",
        "SLURM_JOB_GPUS",
        "SLURM_GPUS_ON_NODE",
        "CUDA_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)


def check_gpu_fields(ctx: LintContext) -> None:
    hooks = {hook.name: hook for hook in api.ALL_HOOKS}
    for function, name in ctx.hook_functions.items():
        params = hooks[name].params
        if "job_env" not in params or params.index("job_env") >= len(function.params):
            continue
        variable = ctx.scopes.declared.get(function.params[params.index("job_env")])
        for access in variable.reads if variable is not None else []:
            index = access.node.parent
            if not isinstance(index, n.Index) or index.obj is not access.node:
                continue
            key = n.static_string(index.key)
            if key in STEP_GPU_FIELDS:
                ctx.report(
                    index,
                    "W807",
                    f"job_env has no {key}: the step's GPUs are known only on its node at "
                    "launch (scrun-cdi-run gives them to the container there)",
                )
