"""scrun-cdi-run: the node-side RunTimeRun wrapper that gives a container step its GPUs (CDI)."""
