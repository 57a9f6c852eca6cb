"""scrunlib.processes: what salloc is started with and how the anchor waits for it; what a
bounded run returns, and how it ends a child that overruns."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scrunlib import processes
from scrunlib.processes import spawn
from waiting import wait_for


def run_reading(argv: list[str]) -> tuple[int | None, str]:
    """Spawn `argv` with its stdout on a pipe; its exit code and output."""
    read_end, write_end = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        child = spawn(argv, {"PATH": "/usr/bin:/bin"}, stdin=null, stdout=write_end, stderr=null)
    finally:
        os.close(write_end)
        os.close(null)
    with os.fdopen(read_end) as output:
        text = output.read()
    return child.wait(timeout=10), text


def test_the_child_gets_its_stdio_and_none_of_our_other_fds():
    inherited_r, inherited_w = os.pipe()
    os.set_inheritable(inherited_w, True)  # as an fd podman's conmon hands us would be
    try:
        code, text = run_reading(["/bin/sh", "-c", "ls /proc/$$/fd"])
    finally:
        os.close(inherited_r)
        os.close(inherited_w)
    assert code == 0
    assert sorted(int(fd) for fd in text.split()) == [0, 1, 2]


def test_sigpipe_and_sigxfsz_are_back_to_their_defaults():
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN  # as Python sets it
    code, text = run_reading(["/bin/cat", "/proc/self/status"])
    ignored = int(
        next(line for line in text.splitlines() if line.startswith("SigIgn:")).split()[1], 16
    )
    assert code == 0
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))


def test_wait_is_bounded_and_the_session_can_be_signalled():
    null = os.open(os.devnull, os.O_RDWR)
    try:
        child = spawn(
            ["/bin/sleep", "30"], {}, stdin=null, stdout=null, stderr=null, new_session=True
        )
    finally:
        os.close(null)
    assert os.getsid(child.pid) == child.pid  # its own session, so its own process group
    assert child.wait(timeout=0.05) is None
    assert child.poll() is None
    child.signal_group(signal.SIGTERM)
    assert child.wait(timeout=10) == -signal.SIGTERM
    assert child.poll() == -signal.SIGTERM  # reaped once, remembered
    child.signal_group(signal.SIGKILL)  # gone: nothing to signal, no error


def test_a_program_that_cannot_run_is_an_oserror():
    with pytest.raises(OSError):
        spawn(["/nonexistent/salloc"], {}, stdin=0, stdout=1, stderr=2)


def test_a_bounded_run_returns_status_and_both_outputs():
    script = "echo out; echo err >&2; exit 3"
    assert processes.run(["/bin/sh", "-c", script], {}, 10) == (3, "out\n", "err\n")
    merged = processes.run(["/bin/sh", "-c", script], {}, 10, merge_output=True)
    assert merged == (3, "out\nerr\n", "")


def test_an_overrunning_run_has_its_whole_group_killed(tmp_path):
    """A script's pipeline dies with it: the grandchild that would write later never does."""
    marker, group = tmp_path / "late", tmp_path / "group"
    script = f"echo $$ >{group}; echo started; (sleep 2; touch {marker}) & sleep 30"
    with pytest.raises(
        processes.TimedOut, match=r"^sh did not finish in 0\.5 s and was killed$"
    ) as info:
        processes.run(["/bin/sh", "-c", script], {}, 0.5)
    assert info.value.output == "started\n"
    leader = int(group.read_text())
    wait_for("the killed group's end", lambda: not running_in_group(leader), 10)
    assert not marker.exists()  # and, none of the group running, nothing is left to write it


def running_in_group(group: int) -> list[str]:
    """The pids of process group `group` that still run (a killed one is a zombie until its
    parent, here init, reaps it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(stat.parent.name)
    return found


def test_a_program_that_cannot_start_is_named():
    with pytest.raises(processes.CannotRun, match=r"^cannot run /nonexistent/x: "):
        processes.run(["/nonexistent/x"], {}, 10)


@pytest.fixture
def cancelled_runs_allowed_again():
    """cancel_running() refuses every later run of this process: undo it after the test."""
    yield
    processes.allow_again()


def test_a_run_after_cancel_running_is_refused(cancelled_runs_allowed_again):
    processes.cancel_running()
    with pytest.raises(processes.CannotRun, match="the container is being removed"):
        processes.run(["/bin/true"], {}, 10)


def test_a_run_started_while_runs_are_cancelled_is_killed_too(
    monkeypatch, cancelled_runs_allowed_again
):
    """The anchor's main thread cancels the runs in flight (the container is removed)
    between stage-in's worker thread checking that it may run a command and registering
    the started command: that command is killed as well, not left to run to its end."""
    import subprocess
    import threading

    real_popen = subprocess.Popen

    def popen_then_cancel(*args, **kwargs):
        started = real_popen(*args, **kwargs)
        canceller = threading.Thread(target=processes.cancel_running)
        canceller.start()
        canceller.join(timeout=10)
        return started

    monkeypatch.setattr(subprocess, "Popen", popen_then_cancel)
    code, _, _ = processes.run(["/bin/sleep", "30"], {}, 10)
    assert code == -signal.SIGKILL


def test_a_prelude_talks_to_the_child_before_it_is_waited_for():
    def prelude(proc):
        assert proc.stdout.read(6) == b"ready\n"
        proc.stdin.write(b"go\n")
        proc.stdin.flush()

    script = "echo ready; read -r word; echo got $word; cat"  # cat: stdin closed after
    code, out, _ = processes.run(
        ["/bin/sh", "-c", script], {}, timeout=10, merge_output=True, prelude=prelude
    )
    assert (code, out) == (0, "got go\n")


def test_a_prelude_that_cannot_go_on_kills_the_child(tmp_path):
    def prelude(proc):
        raise processes.CannotRun("unshare", OSError("no"))

    marker = tmp_path / "ran"
    with pytest.raises(processes.CannotRun, match="cannot run unshare: no"):
        processes.run(["/bin/sh", "-c", f"sleep 5; touch {marker}"], {}, 10, prelude=prelude)
    assert not marker.exists()
    assert not processes._running


@pytest.mark.parametrize("how", ["spawn", "start"])
def test_end_escalates_signal_by_signal_until_the_child_has_ended(how):
    """One idiom for every child, however started: a grace, then each signal in turn."""
    argv = ["/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]
    if how == "spawn":
        child = spawn(argv, {}, stdin=0, stdout=1, stderr=2, new_session=True)
    else:
        child = processes.start(argv, {}, start_new_session=True)
    told: list[int] = []
    started = time.monotonic()
    code = child.end(0.3, (signal.SIGTERM, signal.SIGKILL), group=False, escalating=told.append)
    assert (code, told) == (-signal.SIGKILL, [signal.SIGTERM, signal.SIGKILL])
    assert 0.6 <= time.monotonic() - started < 5
    assert child.poll() == child.wait_ended() == -signal.SIGKILL


def test_end_returns_at_once_for_a_child_that_ends_in_its_grace():
    child = processes.start(["/bin/sh", "-c", "exit 3"], {})
    told: list[int] = []
    assert child.end(10, escalating=told.append) == 3 and told == []


def test_a_forked_function_exits_with_what_it_returns():
    child = processes.fork(lambda: 7)
    assert child.wait(10) == 7


def test_hand_over_names_a_program_it_cannot_run() -> None:
    """scrun-cdi-run's hand-over to crun: a missing program is CannotRun, in its wording."""
    with pytest.raises(processes.CannotRun, match="cannot run /nonexistent/crun: "):
        processes.hand_over(["/nonexistent/crun", "run"], {"PATH": "/usr/bin"})
    with pytest.raises(processes.CannotRun, match="cannot run no-such-runtime: "):
        processes.hand_over(["no-such-runtime", "run"], {"PATH": "/usr/bin"})


def test_hand_over_finds_the_program_on_its_path_and_returns_how_it_ended(tmp_path) -> None:
    program = tmp_path / "runtime"
    program.write_text('#!/bin/sh\n[ "$1" = kill ] && kill -9 $$\nexit 3\n')
    program.chmod(0o755)
    env = {"PATH": f"/nonexistent:{tmp_path}"}
    assert processes.hand_over(["runtime", "run"], env) == 3
    assert processes.hand_over(["runtime", "kill"], env) == -signal.SIGKILL


SHARED = str(Path(__file__).resolve().parents[2] / "shared")
# A wrapper as scrun-cdi-run is, its signals waiting: it hands over to a program that shows
# its signal mask and dispositions (grep reading its /proc/self/status); then, a SIGTERM
# having come, to one that waits (10 s at most) for a signal to be pending and names it.
HANDING_OVER = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from scrunlib import processes, signals
signals.defer()
env = {"PATH": "/usr/bin:/bin"}
code = processes.hand_over(["grep", "-E", "^(SigBlk|SigIgn):", "/proc/self/status"], env)
os.kill(os.getpid(), signal.SIGTERM)
awaiting = "import signal, time\\n"
awaiting += "for _ in range(1000):\\n    if signal.sigpending(): break\\n    time.sleep(0.01)\\n"
awaiting += "print('pending', *sorted(signal.sigpending()))"
sys.exit(code or processes.hand_over([sys.executable, "-c", awaiting], env))
"""


def test_the_program_gets_the_signals_that_waited_and_waits_for_them_too() -> None:
    """The SIGTERM that came to the wrapper is handed on to the program, which starts with
    every signal blocked (crun keeps them until the container can have them) and with
    neither of Python's own ignored (SIGPIPE, SIGXFSZ)."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", HANDING_OVER, SHARED],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    state = {name.rstrip(":"): int(mask, 16) for name, mask in map(str.split, lines[:2])}
    blockable = set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
    assert all(state["SigBlk"] & 1 << (n - 1) for n in blockable if n < 32), done.stdout
    assert not state["SigIgn"] & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1))
    assert lines[2:] == [f"pending {int(signal.SIGTERM)}"], done.stdout


def test_hand_over_leaves_the_signal_mask_as_it_found_it() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert processes.hand_over(["/bin/sh", "-c", "exit 0"], {}) == 0
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_a_streamed_run_hands_each_line_over_as_it_is_written(tmp_path):
    """`on_line` gets a line while the child still runs (here the child waits for what the
    callback does with it), and says which lines stay in the output."""
    go = tmp_path / "go"
    script = f"echo one; echo '>wait'; while [ ! -e {go} ]; do sleep 0.01; done; echo two; exit 4"
    seen = []

    def on_line(line):
        seen.append(line)
        if line == ">wait":
            go.touch()
            return False
        return True

    done = processes.run(["/bin/sh", "-c", script], {}, 10, merge_output=True, on_line=on_line)
    assert done == (4, "one\ntwo\n", "")
    assert seen == ["one", ">wait", "two"]


def test_a_streamed_run_is_bounded_too():
    with pytest.raises(processes.TimedOut, match=r"^sh did not finish in 0\.5 s") as info:
        processes.run(
            ["/bin/sh", "-c", "echo started; sleep 30"], {}, 0.5, merge_output=True,
            on_line=lambda line: True,
        )  # fmt: skip
    assert info.value.output == "started\n"
