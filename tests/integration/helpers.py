"""Small helpers shared by the integration tests (imported as `helpers`: pytest puts this
folder on sys.path, as it has no __init__.py).

The podman, docker, Slurm and harness command lines of the tests are plumbum commands,
composed here and in conftest.py and users.py (`local["podman"]["--runtime", "scrun"]` is a
command of its own, to run, to extend with arguments or to start in the background), and run
by `run`: bounded, never raising on an exit code, a timeout failing the test with the
command named.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from plumbum import local
from plumbum.commands.base import BaseCommand
from scrunlib.slurm_commands import parse_scontrol_record
from waiting import wait_for as wait_for  # the tests' one poll loop (tests/waiting.py)

REPO = Path(__file__).resolve().parents[2]
# podman with scrun as its runtime, as a user types it (a pty session's or a login shell's
# argv); `scrun_podman` is the same as a command.
SCRUN_PODMAN = ("podman", "--runtime", "scrun")


def scrun_podman(*args: str) -> BaseCommand:
    """`podman --runtime scrun ARGS` (podman's configuration: the caller's environment)."""
    return local[SCRUN_PODMAN[0]][(*SCRUN_PODMAN[1:], *args)]


def program(name: str, env: Mapping[str, str]) -> BaseCommand:
    """`name` found on `env`'s PATH (plumbum's `local[name]` looks on this process's): the
    cluster's environment puts this checkout's venv first."""
    return local[shutil.which(name, path=env.get("PATH")) or name]


def run(
    command: BaseCommand,
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    **popen: Any,
) -> subprocess.CompletedProcess[str]:
    """Run `command` to its end: stdin `input` (else empty), stdout and stderr captured as
    text unless `popen` redirects them (stdin=, stdout=, stderr=, cwd=), `env` on top of
    this process's environment. The exit code is the caller's to check; past `timeout`
    seconds the command is killed and the test fails, naming it. (Not plumbum's own
    `run(timeout=)`: it kills the command but then reads its pipes to their end, which a
    process it started, an anchor say, may hold open for as long as it lives.)"""
    proc = local_popen(command, env=env, encoding="utf-8", errors="replace", **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"`{command}` did not finish in {timeout:g} s and was killed", pytrace=False)
    return subprocess.CompletedProcess(command.formulate(), proc.returncode, out or "", err or "")


def local_popen(command: BaseCommand, **popen: Any) -> subprocess.Popen[str]:
    """`command` started. A command of this machine's (`local`) runs in a subprocess.Popen,
    which plumbum wraps and hands every call on to: typed as what it does."""
    return cast("subprocess.Popen[str]", command.popen(**popen))


def job_records(text: str) -> list[dict[str, str]]:
    """`scontrol -o show job|step` output, one record a line, each parsed by scrun's own
    parser (values with spaces stay whole)."""
    return [parse_scontrol_record(line) for line in text.splitlines() if line.strip()]


def wait_for_clean(problems: Callable[[], list[str]], timeout: float) -> None:
    """Wait until `problems()` lists none; else fail the test with the last list."""
    last: list[str] = []

    def clean() -> bool:
        last[:] = problems()
        return not last

    wait_for("nothing left after the test", clean, timeout, lambda: "\n  " + "\n  ".join(last))


def copy_out(
    podman: Callable[..., subprocess.CompletedProcess[str]], name: str, path: str, dest: str
) -> subprocess.CompletedProcess[str]:
    """`podman cp NAME:PATH DEST` from an exited container, after podman's own cleanup of
    it. When the container exits, conmon starts `podman container cleanup`, which unmounts
    its root; a `podman cp` meanwhile reuses the still-mounted root without holding it and
    copies after releasing the container's lock, so the cleanup can unmount it mid-copy
    ("copier: get: globs [PATH] matched nothing"), whatever the runtime. Cleaning up first
    makes cp mount the root itself."""
    podman("container", "cleanup", name)
    return podman("cp", f"{name}:{path}", dest)


def read_terminal(fd: int, until: bytes | None, timeout: float) -> bytes:
    """What a terminal shows, until `until` appears (None: until the other side closes)."""
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (until is None or until not in output):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process on the other side has closed it
            break
        if not chunk:
            break
        output += chunk
    return output


def type_into_terminal(
    argv: list[str], env: dict[str, str], typed: bytes, timeout: float = 60.0
) -> tuple[int, str]:
    """Run `argv` on a new pty as a user would: once it shows a /dev/pts/ name, type
    `typed`; returns its exit code and all it showed."""
    import pty

    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, env)
    try:
        output = read_terminal(terminal, until=b"/dev/pts/", timeout=timeout)
        os.write(terminal, typed)
        output += read_terminal(terminal, until=None, timeout=timeout)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def set_window_size(terminal: int, rows: int, columns: int) -> None:
    """What a terminal emulator does when its window changes: the kernel then signals
    SIGWINCH to the terminal's foreground process group."""
    import fcntl
    import struct
    import termios

    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def session_on_terminal(
    argv: list[str],
    env: dict[str, str],
    size: tuple[int, int],
    until: bytes,
    typed: bytes,
    resize: tuple[int, int] | None = None,
    timeout: float = 60.0,
) -> tuple[int, bytes]:
    """Run `argv` on a new pty of `size` (rows, columns), set before it starts; once it
    shows `until`, change the window to `resize` (if given) and type `typed`. Returns its
    exit code and all it showed, as bytes (a stray byte must be seen)."""
    import pty

    master, slave = pty.openpty()
    set_window_size(slave, *size)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: the pty becomes its controlling terminal
        os.close(master)
        os.login_tty(slave)
        os.execvpe(argv[0], argv, env)
    os.close(slave)
    try:
        output = read_terminal(master, until=until, timeout=timeout)
        if resize is not None:
            set_window_size(master, *resize)
        os.write(master, typed)
        output += read_terminal(master, until=None, timeout=timeout)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    return os.waitstatus_to_exitcode(status), output


# what a --read-only container may write: the tmpfs podman adds (/tmp, /var/tmp, /run), not
# its image's directories, which the cluster's scrun.lua mounts from its image cache
READ_ONLY_PROBE = (
    "for f in /etc/x /bin/x /tmp/x; do touch $f 2>/dev/null && echo $f writable"
    " || echo $f read-only; done"
)
READ_ONLY_SEEN = "/etc/x read-only\n/bin/x read-only\n/tmp/x writable\n"

# In the container under `exec -it`: its terminal's size and `ready`, then (once a line is
# typed) the size after the window changed to 40x120, waited for (the change travels engine
# → conmon or shim → our pty → srun → slurmstepd's pty) at most 10 s. The first size is read
# half a second in: crun's exec sizes the container's pty while the process starts, and a
# `stty size` first thing may find none, with crun alone as through scrun.
TERMINAL_PROGRAM = (
    "[ -t 0 ] && echo terminal; sleep 0.5; stty size; echo ready; read x; i=0; "
    'while [ "$(stty size)" != "40 120" ] && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done; '
    "echo got $x; stty size; exit 5"
)


def assert_terminal_session(
    argv: list[str], env: dict[str, str], *, size_at_start: bool = True
) -> None:
    """`argv` (an engine's `exec -it`) runs TERMINAL_PROGRAM on a 33x101 terminal that
    becomes 40x120: the process has a terminal, sees both sizes (the first only with
    `size_at_start`) and the typed line, no stray byte comes first, and the exit code
    returns."""
    code, shown = session_on_terminal(
        [*argv, "sh", "-c", TERMINAL_PROGRAM], env, (33, 101), b"ready", b"typed\r", (40, 120)
    )
    text = shown.decode(errors="replace")
    assert code == 5, text
    first = b"terminal\r\n33 101\r\n" if size_at_start else b"terminal\r\n"
    assert shown.startswith(first), shown  # nothing before, no NUL
    assert b"\0" not in shown, shown
    assert "got typed\r\n40 120\r\n" in text, text


def waits_for_lock(path: Path) -> bool:
    """Whether a process waits for a lock on the file `path` (/proc/locks: a blocked
    request's line has `->`; the file is `MAJOR:MINOR:INODE`, the device in hex)."""
    status = path.stat()
    wanted = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->":
            major, minor, inode = fields[6].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == wanted:
                return True
    return False


def cmdline(pid: int | str) -> list[str] | None:
    """A process's argv; None when it is gone (or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def salloc_of(anchor_pid: int | str) -> int:
    """The pid of the salloc that holds a container's job: its anchor's child (waited
    for: the anchor starts it once create has parsed the bundle)."""
    found: list[int] = []

    def started() -> bool:
        children = Path(f"/proc/{anchor_pid}/task/{anchor_pid}/children")
        for pid in children.read_text().split() if children.exists() else []:
            if os.path.basename((cmdline(pid) or [""])[0]) == "salloc":
                found.append(int(pid))
        return bool(found)

    wait_for(f"the salloc of anchor {anchor_pid}", started, 30)
    return found[0]


def from_other_checkout(argv: list[str]) -> bool:
    """A process started from another checkout's venv: several checkouts (each with its own
    cluster) may run their suites on one machine at once, sharing the default spool roots;
    what their containers leave is theirs to check."""
    return not any(str(REPO) in arg for arg in argv[:3])


def is_this_checkouts_anchor(argv: list[str]) -> bool:
    """An anchor of this checkout: a forked `scrun create` (`[python] .../scrun [OPTIONS]
    create ...`), or the `scrun-anchor` command run by hand."""
    if from_other_checkout(argv):
        return False
    program = [os.path.basename(arg) for arg in argv[:2]]
    return "scrun-anchor" in program or ("scrun" in program and "create" in argv)


def assert_lists_the_anchors_namespace(
    rows: list[list[str]], output: str, *, pids_of_this_host: bool = False
) -> None:
    """`rows` (pid, ppid, args), what `podman top` or `docker top` listed for a running
    container: the anchor, its salloc and its srun, a tree under the anchor, and nothing of
    the host's (its pid 1, kthreadd). `pids_of_this_host`: docker lists the host's pids, so
    the tree's root has a parent outside it; podman lists the namespace's, where the
    anchor is pid 1."""
    assert all(len(row) == 3 for row in rows), output
    pids = {row[0] for row in rows}
    commands = [row[2] for row in rows]
    assert any("scrun" in command for command in commands), output
    assert any(command.startswith("/usr/bin/salloc ") for command in commands), output
    assert any(command.startswith("/usr/bin/srun ") for command in commands), output
    assert not any("kthreadd" in command for command in commands), output
    roots = [row for row in rows if row[1] not in pids]
    assert len(roots) == 1 and "scrun" in roots[0][2], output
    if pids_of_this_host:
        assert "1" not in pids, output
    else:
        assert roots[0][:2] == ["1", "0"], output
