"""Every child process scrun starts, started here, under one policy.

- The caller gives the complete environment (scrun builds it: the job's, or
  scrunlib.slurm_commands.command_environment for Slurm's commands) and the argv, already
  wrapped by scrunlib.userns.as_real_user where it must run as the real user.
- A child we wait for is bounded: `run` puts it in a process group of its own and, past its
  timeout, kills the whole group (a script's pipeline too), reads what it wrote for at most
  DRAIN_SECONDS more, and raises TimedOut.
- One wording: CannotRun "cannot run PROGRAM: reason", TimedOut "PROGRAM did not finish in
  N s and was killed"; each caller maps them to its own error (scrunlib.errors).

The entries, by what the caller does with the child:
- `run`: run to completion, capture the output (Slurm's queries and cancels, scrun.lua's
  commands);
- `start`: a long-lived child with the caller's stdio (the container's step, `scrun exec`);
- `spawn`: the one child `scrun create` waits for, salloc, without the subprocess module,
  which create's path does without (lint_tree/hotpath.py). os.posix_spawn starts the
  program, the child's pidfd tells when it has ended, waitpid reaps it. `pid_ends_within`
  is that pidfd wait for any process (`scrun delete` waits so for an anchor, conmon's
  child);
- `fork`: `scrun create`'s anchor, a copy of this process running a function;
- `hand_over`: a node-side wrapper's hand-over to the program it wraps, whose parent it
  stays until the program ends, handing it every signal (scrun-cdi-run's to crun).
Each returns a Child (`run` and `hand_over` excepted), with one idiom to wait for it, signal
it and end it.
No other module starts or waits for a process (lint_tree's children rule, `make lint`).
Where subprocess is used it is imported in the function that needs it.

- `run_composed`: a command line composed with plumbum (scrun-stage's pipelines, which no
  engine waits for), run to completion, bounded.

The runtime's command lines are plain argument lists (scrunlib.slurm_commands), which
plumbum would only pass through, and importing it costs more than the commands it would run
(lint_tree/hotpath.py): only `run_composed`'s callers import it.
"""

from __future__ import annotations

import os
from _thread import allocate_lock  # the interpreter holds it from its start; threading does not

from scrunlib import pidns, signals
from scrunlib.errors import reason
from scrunlib.signals import SIGKILL, SIGPIPE, SIGXFSZ

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn

    from plumbum.commands.base import BaseCommand

# After killing a timed-out child's group, how long to read what it wrote before giving up
# (a grandchild that left the group may still hold the pipe).
DRAIN_SECONDS = 5.0

# Python ignores these two and a spawned program would inherit that: give it the defaults
# back, as subprocess does (restore_signals).
_RESTORED_SIGNALS = (SIGPIPE, SIGXFSZ)


class CannotRun(Exception):
    """The program could not be started (missing, not executable, no resources)."""

    def __init__(self, program: str, exc: OSError) -> None:
        super().__init__(f"cannot run {program}: {reason(exc)}")


class TimedOut(Exception):
    """The child ran past its time limit; its process group was killed."""

    def __init__(self, argv: Sequence[str], timeout: float, output: str) -> None:
        program = os.path.basename(argv[0])
        super().__init__(f"{program} did not finish in {timeout:g} s and was killed")
        self.timeout, self.output = timeout, output


# The process groups of the bounded runs in flight. cancel_running() ends them and refuses
# new ones until allow_again(): a container removed while scrun.lua's stage-in runs its
# commands (in the anchor's worker thread) must not wait for an rsync to finish. The main
# thread cancels while the worker starts commands: `_lock` makes "is it refused?" and
# "register it" one step each side, so that a run started meanwhile is killed too.
_running: set[int] = set()
_refusing = False
_lock = allocate_lock()


def _kill_group(group: int, signum: int = SIGKILL) -> None:
    try:  # noqa: SIM105
        os.killpg(group, signum)
    except ProcessLookupError:
        pass  # it ended meanwhile


def cancel_running() -> None:
    """Kill every bounded run in flight (its whole process group); refuse new ones."""
    global _refusing
    with _lock:
        _refusing = True
        for group in _running:
            _kill_group(group)


def allow_again() -> None:
    """Runs start again (stage-out, once an abandoned stage-in has ended)."""
    global _refusing
    with _lock:
        _refusing = False


def _refused() -> bool:
    with _lock:
        return _refusing


def _register(group: int) -> bool:
    """Count a started run as in flight; one started while cancel_running() ran (after
    `_refused()` said no) is killed here, as that call would have killed it: True then."""
    with _lock:
        _running.add(group)
        if _refusing:
            _kill_group(group)
        return _refusing


def _unregister(group: int) -> None:
    with _lock:
        _running.discard(group)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float,
    *,
    merge_output: bool = False,
    prelude: Callable[[subprocess.Popen[bytes]], None] | None = None,
    on_line: Callable[[str], bool] | None = None,
) -> tuple[int, str, str]:
    """Run `argv` with exactly `env`, stdin from /dev/null, in a process group of its own,
    to completion: (exit code, stdout, stderr); the exit code as subprocess's (-N for signal
    N); with `merge_output` stderr goes into stdout (and "" is returned for it). Raises
    CannotRun, or TimedOut after `timeout` seconds. `prelude` talks to the child before it
    is waited for (its stdin is then a pipe, closed once the prelude is done; it raises CannotRun
    when the child cannot go on, and the child's group is killed). `on_line` gets each line
    of the output (with `merge_output`) as soon as the child has written it, and says
    whether the line stays in the output returned (scrun.lua's notices for the user)."""
    import subprocess

    if _refused():
        raise CannotRun(argv[0], OSError("not run: the container is being removed"))
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL if prelude is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_output else subprocess.PIPE,
            env=dict(env),
            process_group=0,
        )
    except OSError as exc:
        raise CannotRun(argv[0], exc) from exc
    killed = _register(proc.pid)
    try:
        if prelude is not None and not killed:
            try:
                prelude(proc)
            except CannotRun:
                _kill_group(proc.pid)
                proc.communicate()
                raise
        if on_line is not None:
            return _stream(proc, argv, timeout, on_line)
        return _finish(proc, argv, timeout)
    finally:
        _unregister(proc.pid)


def run_composed(command: BaseCommand, timeout: float) -> tuple[int, str, str]:
    """Run `command`, a command line or pipeline composed with plumbum (with its own cwd and
    environment, `with_cwd`, `with_env`), to completion: (exit code, stdout, stderr); a
    pipeline fails when any of its commands does. Raises CannotRun, or TimedOut after
    `timeout` seconds (plumbum kills it)."""
    from plumbum.commands.processes import ProcessExecutionError, ProcessTimedOut

    try:
        code, out, err = command.run(retcode=0, timeout=timeout)
    except ProcessExecutionError as exc:
        return int(exc.retcode or 1), str(exc.stdout), str(exc.stderr)
    except ProcessTimedOut:
        raise TimedOut(command.formulate(), timeout, "") from None
    except OSError as exc:
        raise CannotRun(str(command.formulate()[0]), exc) from exc
    return int(code or 0), str(out), str(err)


def _stream(
    proc: subprocess.Popen[bytes],
    argv: Sequence[str],
    timeout: float,
    on_line: Callable[[str], bool],
) -> tuple[int, str, str]:
    """`_finish`, reading the child's output as it comes: each whole line goes to `on_line`
    at once and stays in the output when it says so."""
    import select
    import subprocess
    import time

    assert proc.stdout is not None  # (merge_output: the one pipe)
    deadline = time.monotonic() + timeout
    fd, kept, partial = proc.stdout.fileno(), bytearray(), b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            _timed_out(proc, argv, timeout, bytes(kept) + partial)
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            if on_line(_text(line)):
                kept += line + b"\n"
    proc.stdout.close()
    try:  # (its output is at an end: it has ended, or is about to)
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _timed_out(proc, argv, timeout, bytes(kept) + partial)
    return proc.returncode, _text(bytes(kept) + partial), ""


def _finish(
    proc: subprocess.Popen[bytes], argv: Sequence[str], timeout: float
) -> tuple[int, str, str]:
    """Wait for `proc` (bounded), killing its process group on timeout."""
    import subprocess

    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _timed_out(proc, argv, timeout, b"")
    return proc.returncode, _text(out), _text(err)


def _timed_out(
    proc: subprocess.Popen[bytes], argv: Sequence[str], timeout: float, read: bytes
) -> NoReturn:
    """Kill `proc`'s group, read what is left of its output (after `read`, what was read
    already) for at most DRAIN_SECONDS, and raise TimedOut."""
    import subprocess

    _kill_group(proc.pid)
    try:
        out, _ = proc.communicate(timeout=DRAIN_SECONDS)
    except (subprocess.TimeoutExpired, ValueError):  # (ValueError: _stream closed it)
        out = b""
        proc.kill()
        proc.wait()
    raise TimedOut(argv, timeout, _text(read + (out or b""))) from None


def start(argv: Sequence[str], env: Mapping[str, str], **stdio: Any) -> Child:
    """Start `argv` with exactly `env` and the caller's stdio (subprocess.Popen's stdin,
    stdout, stderr, start_new_session, preexec_fn: the step's controlling terminal, which
    posix_spawn cannot give); the caller waits for it through the Child. Raises
    CannotRun."""
    import subprocess

    try:
        return Child(0, subprocess.Popen(list(argv), env=dict(env), **stdio))
    except OSError as exc:
        raise CannotRun(argv[0], exc) from exc


def hand_over(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run `argv` (found on `env`'s PATH) with exactly `env`, as a wrapper hands over to the
    program it wraps but stays its parent, to learn how it ended (scrun-cdi-run and crun).
    It gets our open descriptors but Python's, the signal dispositions we were given (but
    Python's: SIGPIPE, SIGXFSZ) and every signal blocked, so that one that comes before it
    is ready waits (crun takes them from a signalfd for the container). Each signal that
    comes to us is handed on to it, those that waited in a wrapper (signals.defer) first:
    Slurm signals only a step's task. Returns its exit code (-N: signal N). CannotRun."""
    program = argv[0]
    if "/" not in program:  # as execvpe; not found: posix_spawn says why it cannot run it
        found = (os.path.join(d, program) for d in os.get_exec_path(dict(env)))
        program = next((p for p in found if os.path.isfile(p) and os.access(p, os.X_OK)), program)
    before = signals.defer()
    try:
        pid = os.posix_spawn(program, list(argv), dict(env), setsigdef=_RESTORED_SIGNALS)
    except OSError as exc:
        signals.restore(before)
        raise CannotRun(argv[0], exc) from exc
    child = Child(pid)
    while (code := child.poll()) is None:
        if (signum := signals.wait_for_signal()) != signals.SIGCHLD:
            child.signal(signum)
    signals.restore(before)
    return code


def preload() -> None:
    """Import what `run` and `start` need, now (the anchor: while salloc waits for
    slurmctld, so that neither `start` nor the first Slurm command after `created` pays
    for it)."""
    import subprocess  # noqa: F401


def _text(output: bytes | None) -> str:
    return (output or b"").decode("utf-8", "surrogateescape")


class Child:
    """A process we started, with the one idiom for every child: `poll`, `wait` (bounded),
    `signal` it or its group, `end` it (a grace, then an escalation of signals).

    Made by `spawn` and `fork` (a pid: its pidfd tells when it ends, waitpid reaps it) or
    by `start` (a subprocess.Popen, which reaps it: its own waitpid would race ours)."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = popen.pid if popen is not None else pid
        self.returncode: int | None = None  # as subprocess's: -N for signal N
        self._popen = popen
        # closed once it is reaped (returncode set)
        self._pidfd = os.pidfd_open(pid) if popen is None else -1

    def host_pid(self) -> int:
        """Its pid as the host sees it (ours differs in a pid namespace of our own,
        scrunlib.pidns); 0 once it has ended."""
        if not pidns.in_own_namespace():
            return self.pid
        try:
            pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return 0
        try:
            return pidns.host_pid_of_pidfd(pidfd)
        finally:
            os.close(pidfd)

    def poll(self) -> int | None:
        """Its exit code once it has ended, else None (without waiting)."""
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code, or None when it is still running after `timeout` seconds (None:
        wait as long as it takes)."""
        if self.returncode is not None:
            return self.returncode
        if self._popen is not None:
            import subprocess

            try:
                self.returncode = self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
            return self.returncode
        if timeout is not None and not ends_within(self._pidfd, timeout):
            return None
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        os.close(self._pidfd)
        return self.returncode

    def signal(self, signum: int) -> None:
        """Signal it (not its children), unless it has been reaped."""
        if self._popen is not None:
            self._popen.send_signal(signum)  # a reaped one is left alone
        elif self.returncode is None:
            try:  # noqa: SIM105
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def signal_group(self, signum: int) -> None:
        """Signal its process group (it leads one: spawned with new_session)."""
        if self.returncode is None:
            _kill_group(self.pid, signum)

    def end(
        self,
        grace: float,
        escalation: Sequence[int] = (SIGKILL,),
        *,
        group: bool = True,
        escalating: Callable[[int], None] | None = None,
    ) -> int:
        """Its exit code once it has ended: it has `grace` seconds; then each signal of
        `escalation` in turn goes to its process group (`group`) or to it alone, with
        `grace` seconds after each but the last (SIGKILL, which nothing outlives: waited
        for as long as it takes). `escalating(signum)` is told before each signal."""
        code = self.wait(grace)
        for number, signum in enumerate(escalation, start=1):
            if code is not None:
                return code
            if escalating is not None:
                escalating(signum)
            if group:
                self.signal_group(signum)
            else:
                self.signal(signum)
            code = self.wait(grace if number < len(escalation) else None)
        return code if code is not None else self.wait_ended()

    def wait_ended(self) -> int:
        """Its exit code, waiting as long as it takes."""
        code = self.wait()
        assert code is not None  # an unbounded wait returns only once it has ended
        return code


def ends_within(pidfd: int, timeout: float) -> bool:
    """Whether the process behind `pidfd` ends within `timeout` seconds: a pidfd becomes
    readable the moment its process exits, so nothing polls at an interval."""
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def pid_ends_within(pid: int, timeout: float, still_same: Callable[[], bool]) -> bool:
    """Whether process `pid`, any process (`scrun delete` waits so for an anchor, conmon's
    child, not ours), ends within `timeout` seconds. `still_same()` says whether `pid` is
    still the process meant (not gone, not reused), asked once its pidfd is held."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return not still_same() or ends_within(pidfd, timeout)
    finally:
        os.close(pidfd)


def fork(body: Callable[[], int], *, own_pid_namespace: bool = False) -> Child:
    """Run `body` in a forked copy of this process, which then exits with what it returned
    (127, its traceback on its stderr, should it raise): it never returns into the caller's
    code. The copy has our imports and our stdio: no second interpreter start (`scrun
    create`'s anchor). `own_pid_namespace`: the copy is pid 1 of a new pid namespace, with
    a /proc of its own, where we may make one (scrunlib.pidns); we then fork no more."""
    new_namespace = own_pid_namespace and pidns.new_for_children()
    pid = os.fork()
    if pid == 0:
        if new_namespace:
            try:
                pidns.enter_own_proc()
            except OSError as exc:  # its /proc would not be its namespace's: not go on
                os.write(2, f"scrun: error: cannot mount /proc in a new pid namespace: "
                            f"{reason(exc)}\n".encode())  # fmt: skip
                os._exit(1)
        code = 127
        try:
            code = body()
        except BaseException:  # the child's last resort: its traceback goes to its log
            import traceback

            traceback.print_exc()
        os._exit(code)
    return Child(pid)


def spawn(
    argv: list[str],
    env: dict[str, str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    new_session: bool = False,
) -> Child:
    """Start `argv[0]` (a path: no PATH search) with exactly `env`, the given fds as its
    stdin, stdout and stderr, and none other of ours. Raises OSError when it cannot be
    run."""
    _keep_fds_to_ourselves()
    pid = os.posix_spawn(
        argv[0],
        argv,
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, stdout, 1),
            (os.POSIX_SPAWN_DUP2, stderr, 2),
        ],
        setsid=new_session,
        setsigdef=_RESTORED_SIGNALS,
    )
    return Child(pid)


def _keep_fds_to_ourselves() -> None:
    """posix_spawn passes on every fd not marked close-on-exec. Python's own are marked; an
    fd we inherited (podman's and conmon's sync pipes, say) is not, and a salloc holding
    it open for the container's life could keep our caller waiting."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:  # noqa: SIM105 (the listing's own fd is closed by now)
                os.set_inheritable(fd, False)
            except OSError:
                pass
