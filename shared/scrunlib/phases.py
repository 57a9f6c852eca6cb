"""Where a container's time goes: seconds per phase of its life, kept in its state.json
(`phases`) and written to the debug log when it stops.

parse      the anchor reads its options, the bundle, the SCRUN_* variables, finds scrun.lua
allocate   salloc, meanwhile loading what serving needs (or checking the job SLURM_JOB_ID names)
stage-in   scrun.lua's stage-in and the bundle Slurm can run
launch     from the `start` request until srun has been started
run        the step, from srun's start until it ended
stage-out  scrun.lua's stage-out
teardown   ending the job
"""

from __future__ import annotations

import time


class PhaseClock:
    """Times phases into `record` (the state's `phases` mapping), in seconds."""

    def __init__(self, record: dict[str, float]) -> None:
        self.record = record
        self._started: dict[str, float] = {}

    def start(self, name: str, at: float | None = None) -> None:
        """Begin a phase now, or at `at` (a time.monotonic() taken earlier)."""
        self._started[name] = time.monotonic() if at is None else at

    def stop(self, name: str) -> None:
        """End a phase `start` began; a phase never started is not recorded."""
        began = self._started.pop(name, None)
        if began is not None:
            self.record[name] = round(time.monotonic() - began, 6)

    def phase(self, name: str) -> Phase:
        """`with clock.phase(name):` times the body, also when it raises (a failed phase
        still took its time)."""
        return Phase(self, name)

    def summary(self) -> str:
        """`parse 4.1 ms, allocate 20.3 ms, ...`, in the order the phases ran."""
        return ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in self.record.items())


class Phase:
    """The context manager of PhaseClock.phase (contextlib's would cost create's path its
    import: collections, functools)."""

    __slots__ = ("clock", "name")

    def __init__(self, clock: PhaseClock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.clock.start(self.name)

    def __exit__(self, *_exc: object) -> None:
        self.clock.stop(self.name)
