"""scrun_anchor.life: the container's one state machine, as data."""

import pytest
from scrun_anchor.life import TRANSITIONS, Event, InvalidTransition, Life, Phase
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, Status


@pytest.fixture
def life(tmp_path):
    spool = Spool(str(tmp_path), "c1")
    spool.create()
    state = ContainerState(id="c1", bundle="/b", rootfs="/b/rootfs")
    state.transition(Status.CREATED)
    state.save(spool)
    return Life(state, spool)


def saved_status(life):
    return ContainerState.load(life.spool).status


def test_a_container_that_runs_goes_through_every_phase_and_state_json_follows(life):
    for event, phase, status in (
        (Event.GRANTED, Phase.STAGING, Status.CREATED),
        (Event.STAGED, Phase.READY, Status.CREATED),
        (Event.LAUNCHED, Phase.RUNNING, Status.RUNNING),
        (Event.STEP_ENDED, Phase.STOPPING, Status.STOPPING),
        (Event.STAGED_OUT, Phase.STAGED_OUT, Status.STOPPING),
        (Event.RELEASED, Phase.DONE, Status.STOPPED),
    ):
        life.transition(event)
        assert (life.phase, saved_status(life)) == (phase, status)
    assert life.ended_by == Event.STEP_ENDED and not life.asked_to_stop


def test_every_phase_before_stopping_ends_on_a_failure_or_a_stop():
    live = [phase for phase in TRANSITIONS if Event.STOP in TRANSITIONS[phase]]
    assert live == [Phase.QUEUED, Phase.STAGING, Phase.READY, Phase.RUNNING]
    for phase in live:
        assert TRANSITIONS[phase][Event.FAILED] == TRANSITIONS[phase][Event.STOP] == Phase.STOPPING


def test_a_stop_is_remembered_with_why_and_where_and_a_late_one_changes_nothing(life):
    life.stop("SIGTERM")
    assert (life.phase, life.ended_in, life.why) == (Phase.STOPPING, Phase.QUEUED, "SIGTERM")
    assert life.asked_to_stop and not life.preparing
    life.stop("SIGINT")  # a second signal while the end runs
    assert life.why == "SIGTERM"


def test_an_event_the_phase_does_not_take_is_a_bug(life):
    with pytest.raises(InvalidTransition, match="launched while queued"):
        life.transition(Event.LAUNCHED)
    assert life.phase == Phase.QUEUED
