"""A container's life in its anchor, one state machine as data (as scrunlib.state is for
state.json): the phases, the events that move it, and one `transition`. The anchor's
modules ask it where the container is and tell it what happened; none keeps a phase or a
stop request of its own.

    queued ──granted──> staging ──staged──> ready ──launched──> running
       │                   │                  │                    │
       └── failed, stop ───┴── failed, stop ──┴── failed, stop ────┴── step ended, stop
                                              │
                                              v
                      stopping ──staged out──> staged out ──released──> done

queued      the job is submitted; Slurm has not granted it (salloc's answer wakes us)
staging     scrun.lua's stage-in runs (at once `staged` without a scrun.lua)
ready       what the step runs is known; `start` launches it
running     the step's srun runs
stopping    the container ends: its step's tasks are ended (and Slurm confirms it)
staged out  stage-out has run, or is left to `scrun delete` while tasks may still run;
            a container SIGKILLed before its step ran ends here: its job's end is left to
            `scrun delete` too (the anchor exits at once, as a SIGKILLed process would)
done        the job is ended (salloc ends it with the container's exit code)

The events: `granted` (salloc's answer, or the job joined), `staged`, `launched`, `step
ended` (srun ended by itself: the container's main process exited, or Slurm ended the
step or the job, the job's time limit say), `failed` (preparing or launching the container
failed; a job that ended while queued is one), `stop` (SIGTERM, SIGINT or SIGHUP, which
`scrun delete` sends; `kill` before the step runs; a step that outlives a `kill` SIGKILL,
whose job is cancelled then), `staged out`, `released`.

state.json's status (what the other scrun commands read) follows: entering `running` makes
it running, `stopping` stopping (shown as running), `done` stopped. `created` (reported to
`scrun create`) and a `start` before the container is ready are requests of the engine, not
phases: they set the status alone.
"""

from __future__ import annotations

from scrunlib.state import Status

TYPE_CHECKING = False  # typing is off the anchor's path (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState


class Phase:
    QUEUED = "queued"
    STAGING = "staging"
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stopping"
    STAGED_OUT = "staged out"
    DONE = "done"


class Event:
    GRANTED = "granted"
    STAGED = "staged"
    LAUNCHED = "launched"
    STEP_ENDED = "step ended"
    FAILED = "failed"
    STOP = "stop"
    STAGED_OUT = "staged out"
    RELEASED = "released"


_ENDING = {Event.FAILED: Phase.STOPPING, Event.STOP: Phase.STOPPING}

TRANSITIONS: dict[str, dict[str, str]] = {
    Phase.QUEUED: {Event.GRANTED: Phase.STAGING, **_ENDING},
    Phase.STAGING: {Event.STAGED: Phase.READY, **_ENDING},
    Phase.READY: {Event.LAUNCHED: Phase.RUNNING, **_ENDING},
    Phase.RUNNING: {Event.STEP_ENDED: Phase.STOPPING, **_ENDING},
    Phase.STOPPING: {Event.STAGED_OUT: Phase.STAGED_OUT},
    Phase.STAGED_OUT: {Event.RELEASED: Phase.DONE},
    Phase.DONE: {},
}

# state.json's status once a phase is entered (the others leave it as it is)
STATUS: dict[str, str] = {
    Phase.RUNNING: Status.RUNNING,
    Phase.STOPPING: Status.STOPPING,
    Phase.DONE: Status.STOPPED,
}


class InvalidTransition(Exception):
    """An event the container's phase does not take: a bug of the anchor."""


class Life:
    """Where a container is in its life. `ended_by` is the event that began its end and
    `why` says it for the log (a signal's name, what failed); `ended_in` the phase it was
    in then."""

    def __init__(self, state: ContainerState, spool: Spool) -> None:
        self.state, self.spool = state, spool
        self.phase = Phase.QUEUED
        self.ended_by: str | None = None
        self.ended_in = ""
        self.why = ""

    def transition(self, event: str, why: str = "") -> None:
        """Take `event`; InvalidTransition when the phase does not take it."""
        target = TRANSITIONS[self.phase].get(event)
        if target is None:
            raise InvalidTransition(f"container {self.state.id}: {event} while {self.phase}")
        if target == Phase.STOPPING:
            self.ended_by, self.ended_in, self.why = event, self.phase, why or event
        self.phase = target
        status = STATUS.get(target)
        if status is not None and self.state.status != status:
            self.state.transition(status)
            self.state.save(self.spool)

    def stop(self, why: str) -> None:
        """Asked to stop (a signal may come at any time: once the end has begun it changes
        nothing)."""
        if Event.STOP in TRANSITIONS[self.phase]:
            self.transition(Event.STOP, why)

    @property
    def preparing(self) -> bool:
        """Whether the job is still queued or being staged."""
        return self.phase in (Phase.QUEUED, Phase.STAGING)

    @property
    def ending(self) -> bool:
        """Whether the container's end has begun."""
        return self.ended_by is not None

    @property
    def asked_to_stop(self) -> bool:
        """Whether the end came from outside the step (a stop request, a failure), not
        from the step's own end."""
        return self.ended_by not in (None, Event.STEP_ENDED)
