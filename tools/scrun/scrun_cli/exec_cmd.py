"""`scrun exec [OPTIONS] ID [COMMAND [ARG...]]`: run another process in a running
container, on the node of its task 0, as a new step of the container's job (`srun
--overlap`) that enters the container through the node's OCI runtime (the site's
`exec_command`, see scrunlib.exec_process).

With --detach (how podman's conmon and docker's shim call it) we return once srun runs,
its pid in --pid-file: srun is our child, so the caller (a subreaper) waits for it and gets
the process's exit code. Without, we wait and exit with that code. A command the node's
crun cannot start is told apart on the node, by scrun-cdi-run (127, 126), when the
command runs under it: we have returned by then.
"""

from __future__ import annotations

import os

from scrunlib import exec_process, procio
from scrunlib.errors import InvalidInput, StateError, UsageError
from scrunlib.files import write_atomically
from scrunlib.options import Opt, parse, usage_text
from scrunlib.state import ContainerState, Status, shell_exit_code

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OPTIONS = (
    Opt("process", "p", value=True, metavar="FILE", help="the process (OCI JSON) to run"),
    Opt("detach", "d", help="return once it runs (its pid in --pid-file)"),
    Opt("pid-file", value=True, metavar="FILE", help="write the pid of the process's srun here"),
    Opt("console-socket", value=True, metavar="SOCKET", help="receives the pty master"),
    Opt("tty", "t", help="give the process a terminal"),
    Opt("cwd", value=True, metavar="DIR", help="working directory inside the container"),
    Opt("env", "e", value=True, repeat=True, metavar="K=V", help="set a variable (repeatable)"),
    Opt("user", "u", value=True, metavar="UID[:GID]", help="run as this user"),
    Opt("additional-gids", "g", value=True, repeat=True, ignored=True),
    Opt("cap", "c", value=True, repeat=True, ignored=True),
    Opt("no-new-privs", ignored=True),
    Opt("apparmor", value=True, ignored=True),
    Opt("process-label", value=True, ignored=True),
    Opt("preserve-fds", value=True, ignored=True),
    Opt("cgroup", value=True, ignored=True),
    Opt("ignore-paused", ignored=True),
)
USAGE = usage_text(
    "scrun exec [OPTIONS] CONTAINER-ID [COMMAND [ARG...]]",
    "Run a process inside a running container: a new step of its Slurm job on the node of\n"
    "its task 0, entering it through the node's OCI runtime (site config exec_command,\n"
    "default derived from oci.conf's RunTimeQuery). Exits with the process's exit code;\n"
    "a command crun cannot start, 127 (not there) or 126 (cannot run) when the runtime\n"
    "runs under scrun-cdi-run (exec_command `scrun-cdi-run -- crun ...`, or the default\n"
    "when oci.conf's RunTimeRun runs it), else crun's own 255 or 1.",
    OPTIONS,
)


def _process(values: dict[str, object], command: list[str]) -> exec_process.ExecProcess:
    if values.get("process"):
        if command:
            raise UsageError("exec: give the command in --process or on the line, not both")
        process = exec_process.load_process(str(values["process"]))
        if values.get("tty"):
            process.terminal = True
        return process
    env = values.get("env") or []
    assert isinstance(env, list)
    return exec_process.ExecProcess(
        command,
        env=[str(entry) for entry in env],
        cwd=str(values["cwd"]) if values.get("cwd") else None,
        user=str(values["user"]) if values.get("user") else None,
        terminal=bool(values.get("tty")),
    )


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    # options end at the container id: what follows is the command and its own options
    values, words = parse(argv, OPTIONS, USAGE, what="exec", stop_at_first_word=True)
    if not words:
        raise UsageError("exec: container id not provided")
    container_id, command = words[0], words[1:]
    process = _process(values, command)
    if not process.args:
        raise UsageError("exec: no command given")
    console_socket = values.get("console-socket")
    if process.terminal and not console_socket and (values.get("detach") or not os.isatty(0)):
        raise InvalidInput("exec: a terminal needs --console-socket (or a foreground terminal)")
    state = ContainerState.load(ctx.spool(container_id))
    status = state.effective_status()
    if status != Status.RUNNING or state.job_id is None:
        raise StateError(f"container {container_id!r} is {status}: cannot exec")

    # only here: subprocess and re are no other command's cost (lint_tree/hotpath.py)
    from scrunlib.container_steps import listed_steps
    from scrunlib.slurm import Slurm
    from scrunlib.slurm_commands import STEP_QUIET_ENV, exec_argv

    slurm = Slurm(ctx.site, ctx.slurm_conf)
    steps = listed_steps(slurm, state, (state.step_name,))
    if not steps:
        raise StateError(f"container {container_id!r} has no running step: cannot exec")
    node = slurm.step_nodes(state.job_id, steps[0])[0]
    template = exec_process.site_template(ctx.site.exec_command, ctx.slurm_conf)
    patterns = exec_process.task_values(node, state.owner, state.job_id, steps[0])
    command_line = exec_process.node_command(template, process, patterns)
    srun = exec_argv(slurm.path("srun"), state.job_id, node, command_line, pty=process.terminal)
    pty_slave = procio.send_console(str(console_socket)) if console_socket else None
    if pty_slave is not None:
        srun = procio.when_sized(srun)
    env = {"SLURM_CONF": ctx.slurm_conf, "PATH": "/usr/local/bin:/usr/bin:/bin", **STEP_QUIET_ENV}
    step = slurm.start(srun, env, **procio.srun_stdio(pty_slave))
    if pty_slave is not None:
        os.close(pty_slave)
    if values.get("pid-file"):
        write_atomically(os.path.abspath(str(values["pid-file"])), str(step.pid))
    if values.get("detach"):
        return 0
    return shell_exit_code(step.wait_ended())
