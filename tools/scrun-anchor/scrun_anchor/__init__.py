"""scrun-anchor: the per-container process that holds the Slurm job and runs the step."""
