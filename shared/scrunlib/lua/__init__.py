"""scrun.lua support: the `slurm` table, the hooks, staging. See api.py for the contract."""
