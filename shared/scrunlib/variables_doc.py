"""docs/scrun-variables.md, generated from the SCRUN_* table in scrunlib.job_options.

`python -m scrunlib.variables_doc > docs/scrun-variables.md` writes it; a unit test keeps the
file in sync with the table.
"""

from __future__ import annotations

from scrunlib.job_options import (
    ANNOTATION_PREFIX,
    OUTPUT_VARIABLES,
    VARIABLES,
    JobVariable,
)
from scrunlib.slurm_commands import SLURM_INPUT_PREFIXES
from scrunlib.slurm_version import version_text
from scrunlib.value_kinds import KINDS


def markdown_table() -> str:
    """docs/scrun-variables.md: job_options.VARIABLES as the user reads it."""
    lines = [
        "# SCRUN_* job variables",
        "",
        "<!-- Generated from shared/scrunlib/job_options.py by",
        "     `python -m scrunlib.variables_doc > docs/scrun-variables.md`; do not edit. -->",
        "",
        "scrun reads these from its environment after adding the container's config.json",
        "`process.env` (so `podman run -e SCRUN_PARTITION=debug …` works; the container's",
        "value wins over the caller's). Every value is checked before anything is submitted;",
        "a bad one stops `create` with a one-line error naming the variable, the value and",
        "the reason.",
        "",
        "*Goes to*: **allocation** = an option of `salloc`, which creates and holds the job;",
        "**step** = an option of the container's `srun --container`; **job name** = the",
        "`--job-name` of both. When `SLURM_JOB_ID` is set the container runs in that job:",
        "allocation variables are still checked but have no effect.",
        "Options are passed as `--option=value`, one argument each, never through a shell.",
        "",
        "| variable | option | value | goes to | notes |",
        "|---|---|---|---|---|",
    ]
    for variable in VARIABLES:
        lines.append(
            f"| `{variable.name}` | `{variable.option}` | {variable.kind.name} "
            f"| {variable.target} | {_notes(variable)} |"
        )
    lines += [
        "",
        "## What steers the job: only SCRUN_* variables",
        "",
        "As with upstream's scrun (which calls Slurm's API), only the SCRUN_* variables above",
        "and `SLURM_CONF` (which slurm.conf; `-f` wins over it, it wins over the site file)",
        "steer a container's job. Slurm's own input variables, "
        + ", ".join(f"`{prefix}*`" for prefix in SLURM_INPUT_PREFIXES)
        + ",",
        "are removed from the environment of every Slurm command scrun runs (`salloc`,",
        "`srun`, `squeue`, `scancel`, `scontrol`), whether they come from the caller's",
        "shell (podman 5 and docker pass it on), from podman's own environment or from",
        "`config.json` `process.env`. So `SALLOC_PARTITION=second podman run …` does not",
        "move the job; `SCRUN_PARTITION=second` does. What scrun sets itself is kept:",
        "`SLURM_CONF`, and for the container's step and `slurm.remote_command` the job's",
        "`SLURM_*` variables (below). `SLURM_JOB_ID` is read by scrun itself: set, the",
        "container runs in that existing job (scrun passes `--jobid`).",
        "",
        "`scrun.lua`'s `slurm.allocator_command` and `slurm.remote_command` run with the job",
        "environment scrun builds (below); while it is empty (no job yet), as upstream, with",
        "scrun's own environment, minus the same Slurm input variables; both with",
        "`SLURM_CONF`, the slurm.conf scrun uses, so the Slurm commands a script runs",
        "(`scontrol`, `squeue`, the `srun` of a remote command) ask scrun's cluster. The",
        "script's own `os.execute` and `io.popen` inherit scrun's environment unchanged",
        "(Lua's own functions: scrun does not run those commands).",
        "",
        "## Value kinds",
        "",
        "| kind | accepted |",
        "|---|---|",
    ]
    lines += [f"| {kind.name} | {kind.accepts} |" for kind in KINDS]
    lines += [
        "",
        "## Differences from upstream scrun",
        "",
        "* Variables for srun-only options go to the container step; upstream aborts",
        "  `create` when one is set.",
        "* `SCRUN_JOB_NAME` names the job; upstream always names it `scrun`.",
        "* Flags: `true` sets a flag (upstream: only empty, `yes` or a non-zero number do),",
        "  and a value that is none of the flag words is an error (upstream: flag unset).",
        "* `SCRUN_JOB_NODELIST` asks for those nodes (`salloc --nodelist`); upstream",
        "  rejects it.",
        "* `SCRUN_WAIT4SWITCH` without `SCRUN_REQ_SWITCH` is an error (alone it does nothing).",
        "* Options the running Slurm does not have are refused before submitting, naming the",
        "  Slurm version that has them.",
        "* Values are checked here first; Slurm accepts some that it then ignores or",
        "  misreads (`--time=soon` fails, but `--switches=2@soon` does not).",
        "",
        "## Output variables, and what the container sees",
        "",
        "scrun sets these in the job environment: `scrun.lua`'s `job_env`, the environment of",
        "`slurm.allocator_command` / `slurm.remote_command`, and the container step's srun:",
        "",
        ", ".join(f"`{name}`" for name in OUTPUT_VARIABLES) + f", `{ANNOTATION_PREFIX}<key>`",
        "(one per annotation), plus the job's `SLURM_*` variables (`SLURM_JOB_ID`,",
        "`SLURM_JOB_NODELIST`, `SLURM_JOB_NUM_NODES`, `SLURM_TASKS_PER_NODE`,",
        "`SLURM_CLUSTER_NAME`, `SLURM_JOB_PARTITION`, …: those salloc gives any command of the",
        "job, as upstream's scrun takes them from the allocation; in a job joined through",
        "`SLURM_JOB_ID`, built from its `scontrol show job` record) and `SLURM_CONTAINER`",
        "(`SLURM_CONTAINER_ID` on Slurm ≥ 23.02).",
        "",
        "The container itself sees its own `config.json` `process.env` (what `-e` gave it) plus",
        "the variables slurmstepd sets for every step task (`SLURM_JOB_ID`, `SLURM_STEP_ID`, …).",
        "The SCRUN_* output variables do **not** reach it: the step runs with `srun",
        "--export=NONE`, as upstream, so the host's environment and scrun's bookkeeping stay",
        "out of the container. A site that wants them inside can append `job_env` to",
        "`process.env` in its `scrun.lua` (the man page's example does).",
    ]
    return "\n".join(lines) + "\n"


def _notes(variable: JobVariable) -> str:
    notes = []
    if variable.since:
        notes.append(f"Slurm ≥ {version_text(variable.since)}")
    if variable.until:
        notes.append(f"Slurm < {version_text(variable.until)} (removed)")
    notes += [f"`{value}` needs Slurm ≥ {version_text(v)}" for value, v in variable.value_since]
    if variable.note:
        notes.append(variable.note)
    return "; ".join(notes)


if __name__ == "__main__":
    print(markdown_table(), end="")
