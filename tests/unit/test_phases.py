"""Phase timings: what state.json's `phases` and the debug log's summary hold."""

import time

import pytest
from scrunlib.phases import PhaseClock


def test_phases_are_recorded_in_the_order_they_ran():
    record: dict[str, float] = {}
    clock = PhaseClock(record)
    clock.start("parse", at=time.monotonic() - 0.5)  # began before the clock existed
    clock.stop("parse")
    with clock.phase("allocate"):
        pass
    assert list(record) == ["parse", "allocate"]
    assert 0.5 <= record["parse"] < 5 and 0 <= record["allocate"] < 1
    assert clock.summary().startswith("parse 5") and ", allocate " in clock.summary()


def test_a_failed_phase_still_counts_and_an_unstarted_one_does_not():
    record: dict[str, float] = {}
    clock = PhaseClock(record)
    with pytest.raises(RuntimeError), clock.phase("stage-in"):
        raise RuntimeError("stage-in failed")
    clock.stop("run")  # never started: the container never ran
    assert list(record) == ["stage-in"]
