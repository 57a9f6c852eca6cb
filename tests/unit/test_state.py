"""The container state machine and its persistence."""

import os

import pytest
from scrunlib.errors import ContainerNotFound, StateError
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, Status, process_start_time


@pytest.fixture
def spool(tmp_path):
    made = Spool(str(tmp_path), "c1")
    made.create()
    return made


def test_transitions_follow_the_machine():
    state = ContainerState(id="c1", bundle="/b", rootfs="/b/rootfs")
    state.transition(Status.CREATED)
    state.transition(Status.RUNNING)
    assert state.started
    state.transition(Status.STOPPING)
    assert not state.finished
    with pytest.raises(StateError, match="from stopping to running"):
        state.transition(Status.RUNNING)
    state.transition(Status.STOPPED)
    assert state.finished
    with pytest.raises(StateError, match="from stopped to running"):
        state.transition(Status.RUNNING)


@pytest.mark.parametrize("status", [Status.CREATED, Status.RUNNING, Status.PAUSED])
def test_stopped_is_reached_only_through_stopping(status):
    """The anchor records `stopping` while it ends the tasks and stages out: a direct
    `stopped` would tell a client the container had ended before its files were back."""
    state = ContainerState(id="c1", bundle="/b", rootfs="/b/rootfs", status=status)
    with pytest.raises(StateError, match=f"from {status} to stopped"):
        state.transition(Status.STOPPED)
    state.transition(Status.STOPPING)


@pytest.mark.parametrize(
    ("started", "shown"), [(False, Status.CREATED), (True, Status.RUNNING)], ids=str
)
def test_a_stopping_container_is_shown_as_it_was_with_the_anchors_pid(started, shown):
    """The OCI document knows no `stopping`: until its end is complete, the container is
    what it was, and its pid (the anchor's) is there to watch."""
    state = ContainerState(id="c1", bundle="/b", rootfs="/r", status=Status.CREATED, exit_code=3)
    if started:
        state.transition(Status.RUNNING)
    state.transition(Status.STOPPING)
    state.anchor_pid = os.getpid()
    state.anchor_start_time = process_start_time(os.getpid())
    document = state.oci_state()
    assert (document["status"], document["pid"]) == (shown, os.getpid())
    assert "exitCode" not in document
    state.anchor_start_time = (state.anchor_start_time or 0) + 1  # it died while stopping
    assert state.oci_state()["status"] == Status.STOPPED


def test_created_cannot_go_back_to_creating():
    state = ContainerState(id="c1", bundle="/b", rootfs="/b/rootfs", status=Status.CREATED)
    with pytest.raises(StateError):
        state.transition(Status.CREATING)


def test_save_and_load_round_trip(spool):
    state = ContainerState(
        id="c1", bundle="/b", rootfs="/b/rootfs", job_id=42, exit_code=3, status=Status.STOPPED
    )
    state.save(spool)
    loaded = ContainerState.load(spool)
    assert loaded.as_dict() == state.as_dict()
    assert not [name for name in os.listdir(spool.path) if name.endswith(".tmp")]


def test_load_of_unknown_container(tmp_path):
    with pytest.raises(ContainerNotFound, match="'nope' does not exist"):
        ContainerState.load(Spool(str(tmp_path), "nope"))


def test_dead_anchor_means_stopped():
    state = ContainerState(id="c1", bundle="/b", rootfs="/r", status=Status.RUNNING)
    state.anchor_pid = os.getpid()
    state.anchor_start_time = process_start_time(os.getpid())
    assert state.effective_status() == Status.RUNNING
    assert state.oci_state()["pid"] == os.getpid()
    state.anchor_start_time = (state.anchor_start_time or 0) + 1  # a reused pid
    assert state.effective_status() == Status.STOPPED
    assert state.oci_state()["pid"] == 0


def test_creating_without_anchor_yet_is_creating():
    state = ContainerState(id="c1", bundle="/b", rootfs="/r")
    assert state.effective_status() == Status.CREATING


def test_oci_state_document():
    state = ContainerState(
        id="c1", bundle="/b", rootfs="/r", annotations={"a": "b"}, job_id=7, exit_code=3,
        status=Status.STOPPED,
    )  # fmt: skip
    document = state.oci_state()
    assert document["status"] == "stopped"
    assert document["pid"] == 0
    assert document["jobId"] == 7
    assert document["exitCode"] == 3
    assert document["annotations"] == {"a": "b"}
    assert set(document) >= {"ociVersion", "id", "status", "pid", "bundle"}
