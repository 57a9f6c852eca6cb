"""scrun-stage: run scrun.lua's stage-in/stage-out by hand, for troubleshooting."""
