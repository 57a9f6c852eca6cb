"""`scrun exec`: the process to start in a running container, and the command that starts it
on the compute node that runs the container's task 0.

oci.conf has no exec hook, so the node-side command comes from the site configuration's
`exec_command`, a template in oci.conf's own pattern language:

    exec_command = "crun --rootless=true --root=/run/user/$(id -u)/crun exec %o %n.%u.%j.%s.%t"

%o: the exec options, %n: node name, %u: user name, %U: user id, %j: job id, %s: step id,
%t: task id (0), %Z: the step's working directory (Slurm 26.05's oci.conf pattern; scrun
runs every container step with --chdir=/), %%: a percent sign. The whole runs under
/bin/sh -c on the node. The process podman and docker give (`--process FILE`) goes whole
to the runtime, as they give it to crun: %o is `--process /dev/fd/3`, and the command reads
the process's JSON on fd 3 from a here-document (its supplementary groups, umask,
capabilities and terminal size, which no other exec option carries). A process given by
options (`scrun exec ID CMD...`) has %o `--cwd`, `--env`, `--user` (shell-quoted), and its
command and arguments appended, shell-quoted. oci.conf's patterns that only slurmstepd
knows (%m, %e, %p, %@) are refused with what they are.
For a template of the form `<runtime> exec %o <name>`, the command first waits (10 s at
most) until `<runtime> state <name>` finds the container: slurmstepd creates it a moment
after the step starts.
Without `exec_command`, one is derived from oci.conf's RunTimeQuery (`<runtime> state
<name>` becomes `<runtime> exec %o <name>`): runc and crun take the same exec options. When
oci.conf's RunTimeRun runs scrun-cdi-run, the derived one runs under it too (`<its path> --
<runtime> exec %o <name>`): a command crun cannot start then exits 127 or 126, as through
crun, not with crun's own 1 or 255 (scrun_cdi.wrapper). A site's `exec_command` is used as
it is: `scrun-cdi-run -- ` before its runtime does the same. The wait above runs the
runtime's `state` without the wrapper, and so does the anchor's SIGKILL (kill_template:
`<runtime> kill <name> KILL`, run on the node by scrun_anchor.step_signals).

A process with a terminal gets one of the container's own /dev/pts (so that `tty` names
it): %o then also holds `--tty --console-socket "$SCRUN_CONSOLE_SOCKET"`, and the command
runs under CONSOLE_RELAY, a small stdlib program of python3 on the node. It listens on
that socket, takes the pty master the runtime sends, puts the step's own terminal (`srun
--pty`, the node's pty) in raw mode and copies between the two, and passes each resize
slurmstepd applies to the step's terminal (SIGWINCH) on to the container's: the runtime's
own relay (`crun exec --tty` without a socket) passes none on. crun sizes the container's
pty from its stdin, the step's terminal, in its parent while the process starts: a process
that reads its size first thing may find none, as under podman with crun alone. A node
without python3 gets the step's terminal itself, as fds 0-2 (isatty, stty and /dev/tty
work; `tty` cannot name a device of the node's /dev/pts).
"""

from __future__ import annotations

import json
import os
import re
import shlex

from scrunlib.errors import InvalidInput, ScrunError, reason
from scrunlib.slurm_commands import NODE_CWD
from scrunlib.userns import real_ids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

_PATTERN = re.compile(r"%(.)")
_KEY = re.compile(r"^\s*(RunTimeQuery|RunTimeRun)\s*=\s*(.*?)\s*$", re.IGNORECASE)
# Only a plain `<runtime> state <name of % patterns>`: a RunTimeQuery that is a shell program
# (a loop over the step's containers, say) names no one container to exec into.
_STATE_CALL = re.compile(r"^(?P<runtime>[^;&|]*?)\s+state\s+(?P<name>%[^\s;]+)")
_EXEC_CALL = re.compile(r"^(?P<runtime>.*?)\s+exec\s+%o\s+(?P<name>\S+)$")
# scrun-cdi-run (scrun_cdi.wrapper), the node's RunTimeRun wrapper, wrapping an exec too
WRAPPER = "scrun-cdi-run"
_WRAPPED = re.compile(rf"^(?:.*?\s)?\S*{WRAPPER}\s+--\s+(?P<runtime>.*)$")
# oci.conf patterns whose value exists only in slurmstepd on the node
_NODE_ONLY_PATTERNS = {
    "m": "the step's spool directory on the node (Slurm >= 25.05: a per-step directory)",
    "e": "the step's environment file on the node",
    "p": "the pid of the step's first process on the node",
    "@": "the step's command line",
}
# `podman run -d` returns once the step is launched; slurmstepd may not have created the
# container yet: wait for it (at most this many tenths of a second)
READY_TENTHS = 100

# The node's side of a terminal (see the module's docstring): python3 -c CONSOLE_RELAY
# ARGV... runs ARGV with SCRUN_CONSOLE_SOCKET naming the socket it listens on, and exits
# with ARGV's exit code; CONSOLE_OPTIONS go into %o, for the runtime.
CONSOLE_OPTIONS = '--tty --console-socket "$SCRUN_CONSOLE_SOCKET"'
# %o for a process the engine gave: its JSON, which the command feeds on fd 3
PROCESS_OPTION = "--process /dev/fd/3"
CONSOLE_RELAY = """\
import fcntl, os, select, signal, socket, sys, tempfile, termios, tty


def finish(status):
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


directory = tempfile.mkdtemp(prefix="scrun-console-")
path = os.path.join(directory, "socket")
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(1)
server.settimeout(0.1)
runtime = os.posix_spawn(sys.argv[1], sys.argv[1:], dict(os.environ, SCRUN_CONSOLE_SOCKET=path))
master = -1
try:
    while master < 0:
        try:
            connection, _ = server.accept()
        except socket.timeout:
            ended, status = os.waitpid(runtime, os.WNOHANG)
            if ended:  # it failed before it had a terminal to send
                finish(status)
            continue
        with connection:
            _, fds, _, _ = socket.recv_fds(connection, 1, 1)
        master = fds[0] if fds else -1
finally:
    server.close()
    os.unlink(path)
    os.rmdir(directory)
# the container's terminal does the line discipline; the step's passes bytes through
saved = termios.tcgetattr(0) if os.isatty(0) else None
if saved:
    tty.setraw(0)


def resize(*_):
    try:
        size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\\0" * 8)
        fcntl.ioctl(master, termios.TIOCSWINSZ, size)
    except OSError:
        pass  # stdin is no terminal


signal.signal(signal.SIGWINCH, resize)  # slurmstepd resized the step's terminal
resize()


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


inputs = [0, master]
try:
    while master in inputs:
        readable, _, _ = select.select(inputs, [], [])
        if master in readable:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process and the runtime closed the terminal
                data = b""
            if data:
                write_all(1, data)
            else:
                inputs.remove(master)
        if 0 in readable and 0 in inputs:
            data = os.read(0, 65536)
            if data:
                write_all(master, data)
            else:
                inputs.remove(0)
finally:
    if saved:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
finish(os.waitpid(runtime, 0)[1])
"""


class ExecProcess:
    """What runs: args, env, cwd, user and whether it wants a terminal (an OCI `process`);
    `document`: the whole process as the engine gave it, None for one given by options."""

    __slots__ = ("args", "cwd", "document", "env", "terminal", "user")

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Sequence[str] = (),
        cwd: str | None = None,
        user: str | None = None,
        terminal: bool = False,
        document: dict[str, Any] | None = None,
    ) -> None:
        self.args, self.env, self.cwd = tuple(args), tuple(env), cwd
        self.user, self.terminal, self.document = user, terminal, document

    def runtime_options(self) -> list[str]:
        """The options runc and crun `exec` both take for this process, but the terminal's
        (see the module docstring)."""
        options = []
        if self.cwd:
            options += ["--cwd", self.cwd]
        for entry in self.env:
            options += ["--env", entry]
        if self.user:
            options += ["--user", self.user]
        return options


def load_process(path: str) -> ExecProcess:
    """An OCI `process` object from a file (podman's and docker's --process)."""
    try:
        with open(path, encoding="utf-8") as stream:
            process = json.load(stream)
    except OSError as exc:
        raise InvalidInput(f"cannot read process file {path}: {reason(exc)}") from exc
    except ValueError as exc:
        raise InvalidInput(f"process file {path} is not valid JSON: {exc}") from exc
    return parse_process(process, path)


def parse_process(process: Any, where: str) -> ExecProcess:
    if not isinstance(process, dict):
        raise InvalidInput(f"{where}: the process must be a JSON object")
    args = process.get("args")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise InvalidInput(f"{where}: args must be a list of strings")
    env = process.get("env", [])
    if not isinstance(env, list) or not all(isinstance(entry, str) for entry in env):
        raise InvalidInput(f"{where}: env must be a list of strings")
    cwd = process.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise InvalidInput(f"{where}: cwd must be a string")
    user = process.get("user") or {}
    if not isinstance(user, dict):
        raise InvalidInput(f"{where}: user must be an object")
    uid, gid = user.get("uid"), user.get("gid")
    for name, value in (("uid", uid), ("gid", gid)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidInput(f"{where}: user.{name} must be a number")
    user_option = None
    if uid is not None:
        user_option = str(uid) if gid is None else f"{uid}:{gid}"
    terminal = process.get("terminal", False)
    if not isinstance(terminal, bool):
        raise InvalidInput(f"{where}: terminal must be a boolean")
    return ExecProcess(
        args, env=env, cwd=cwd or None, user=user_option, terminal=terminal, document=process
    )


def template_from_oci_conf(text: str) -> str | None:
    """`<runtime> exec %o <name>` from oci.conf's RunTimeQuery, None without a usable one;
    under scrun-cdi-run (`<its path> -- `) when RunTimeRun runs it."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _KEY.match(line)
        if match:
            value = match.group(2)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            values[match.group(1).lower()] = value
    call = _STATE_CALL.match(values.get("runtimequery", ""))
    if call is None:
        return None
    words = values.get("runtimerun", "").split()
    wrapper = next((word for word in words if os.path.basename(word) == WRAPPER), None)
    template = f"{call.group('runtime')} exec %o {call.group('name')}"
    return f"{wrapper} -- {template}" if wrapper else template


def node_command(template: str, process: ExecProcess, values: Mapping[str, str]) -> str:
    """The shell command for the node: `template` expanded, with the process on fd 3 or its
    args appended (see the module docstring). `values`: the text for each pattern letter
    but `o` (node, user, ids, working directory). With a terminal, the command runs under
    CONSOLE_RELAY where the node has python3."""

    def runtime_call(terminal: bool) -> tuple[str, str]:
        """The runtime's command, with the process given whole (its `terminal` as the
        runtime gets one) or by its args; and the here-document's lines that must follow
        the line it ends ("" for args)."""
        console = CONSOLE_OPTIONS if terminal else ""
        options = (
            PROCESS_OPTION
            if process.document is not None
            else shlex.join(process.runtime_options())
        )
        call = expand_patterns(
            template, values, template, " ".join(filter(None, [options, console]))
        )
        if process.document is None:
            return f"{call} {shlex.join(process.args)}", ""
        document = json.dumps({**process.document, "terminal": terminal}, ensure_ascii=True)
        end = "SCRUN_PROCESS"  # one line of JSON is never this one
        return f"{call} 3<<'{end}'", f"\n{document}\n{end}\n"

    command, here_document = runtime_call(False)
    if process.terminal:
        relayed = "".join(runtime_call(True))
        command = (
            f"if command -v python3 >/dev/null 2>&1; then exec python3 -c "
            f"{shlex.quote(CONSOLE_RELAY)} /bin/sh -c {shlex.quote(relayed)}; "
            f"else {command}; fi"
        )
    container = _runtime_and_name(template)
    if container is None:
        return command + here_document
    state = expand_patterns(f"{container[0]} state {container[1]}", values, template)
    return (
        f"i=0; until {state} >/dev/null 2>&1 || [ $i -ge {READY_TENTHS} ]; "
        f"do i=$((i+1)); sleep 0.1; done; {command}{here_document}"
    )


def kill_template(template: str) -> str | None:
    """The node's command that sends SIGKILL to the container's process, its patterns not
    yet expanded (expand_patterns), for a template of the form `<runtime> exec %o <name>`:
    `<runtime> kill <name> KILL` (runc's and crun's; the runtime's own under
    scrun-cdi-run). None for another form."""
    container = _runtime_and_name(template)
    return None if container is None else f"{container[0]} kill {container[1]} KILL"


def _runtime_and_name(template: str) -> tuple[str, str] | None:
    """The runtime's command line (without scrun-cdi-run, which runs only run and exec)
    and the container's name pattern, for a template of the form `<runtime> exec %o
    <name>`; None for another form."""
    call = _EXEC_CALL.match(template)
    if call is None:
        return None
    runtime = call.group("runtime")
    wrapped = _WRAPPED.match(runtime)
    return (wrapped.group("runtime") if wrapped else runtime), call.group("name")


def expand_patterns(text: str, values: Mapping[str, str], template: str, options: str = "") -> str:
    """`text` (the site's `template`, or a command made from it) with its patterns
    replaced: %o by `options`, the others by `values`, shell-quoted. ScrunError for a
    pattern only slurmstepd knows, or one unknown."""

    def expand(match: re.Match[str]) -> str:
        letter = match.group(1)
        if letter == "%":
            return "%"
        if letter == "o":
            return options
        if letter in _NODE_ONLY_PATTERNS and letter not in values:
            raise ScrunError(
                f"exec_command: %{letter} is {_NODE_ONLY_PATTERNS[letter]}, which only "
                f"slurmstepd knows: not usable for exec ({template!r})"
            )
        if letter not in values:
            raise ScrunError(f"exec_command: unknown pattern %{letter} in {template!r}")
        return shlex.quote(values[letter])

    return _PATTERN.sub(expand, text)


def site_template(exec_command: str | None, slurm_conf: str) -> str:
    """The template of the node's command: the site's `exec_command`, else the one derived
    from the oci.conf beside slurm.conf (default_template)."""
    return exec_command or default_template(slurm_conf)


def task_values(node: str, owner: str, job_id: int, step_id: int) -> dict[str, str]:
    """The text of each pattern letter but %o, for the container's task 0 on `node`: the
    user's name and id (the job's user, also inside rootless podman), the job, the step,
    the task and the step's working directory (its --chdir)."""
    return {
        "n": node,
        "u": owner,
        "U": str(real_ids()[0]),
        "j": str(job_id),
        "s": str(step_id),
        "t": "0",
        "Z": NODE_CWD,
    }


def default_template(slurm_conf: str) -> str:
    """The template derived from the oci.conf beside slurm.conf; one clear error if none."""
    oci_conf = os.path.join(os.path.dirname(slurm_conf), "oci.conf")
    try:
        with open(oci_conf, encoding="utf-8") as stream:
            template = template_from_oci_conf(stream.read())
    except OSError as exc:
        raise ScrunError(
            f"exec needs exec_command in the site config ({oci_conf}: {reason(exc)})"
        ) from exc
    if template is None:
        raise ScrunError(
            f"exec needs exec_command in the site config ({oci_conf} has no "
            "RunTimeQuery of the form `<runtime> state <name>`)"
        )
    return template
