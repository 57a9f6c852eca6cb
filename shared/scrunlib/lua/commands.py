"""How `slurm.allocator_command` and `slurm.remote_command` run their shell scripts.

The Lua runtime talks to a `CommandRunner`, never to subprocess directly, so that a dry run
(scrun-lua-check, tests) can record what a script would run instead of running it.
`SubprocessRunner` is the real thing: `/bin/sh -c SCRIPT` locally, or the same through
`srun` inside the job. Unlike upstream (which waits forever) every command has a time limit,
so a hung rsync cannot keep a container in `creating` for the job's whole time limit.

On timeout the command's whole process group is killed (scrunlib.processes) and the runner
raises `CommandTimeout`; the Lua runtime turns that into a Lua error at the script's line
(the hook fails unless the script catches it with pcall). It never returns a made-up status, so a
script cannot mistake a killed rsync for one that finished.

Exit status: `WEXITSTATUS`, and 128+N for a child killed by signal N (upstream reports 0).

Notices: a line of a command's output that starts with `scrun: ` is for the user. Given a
`tell_user` (the anchor's channel to the container's stderr), the runner hands it each such
line as soon as the command has written it, and leaves it out of the output the script
gets: a long first import says so while it runs (docs/scrun-lua's scripts). Upstream
leaves the line in the output, where it does no harm.
"""

from __future__ import annotations

import os

from scrunlib import processes, siteconfig
from scrunlib.errors import ScrunError
from scrunlib.state import shell_exit_code
from scrunlib.userns import with_all_user_ids

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from scrunlib.lua.records import CommandKind

    # What a RecordingRunner answers a command with: (exit status, output).
    Responder = Callable[[CommandKind, str], tuple[int, str]]

# Exit status reported when the command itself could not be started (a shell says the same).
NOT_RUNNABLE = 127

# What starts a line of a command's output that is a notice for the user.
NOTICE_PREFIX = "scrun: "


class CommandTimeout(Exception):
    """The command ran past its time limit and its process group was killed."""

    def __init__(self, timeout: float, output: str) -> None:
        super().__init__(f"timed out after {timeout:g} s")
        self.timeout = timeout
        self.output = output


class CommandRunner:
    """Runs the two kinds of scrun.lua commands. Returns (exit status, stdout+stderr).

    `env` is the complete environment for the child (the job env, or the anchor's own when
    the job env is empty). Raise `CommandTimeout` when `timeout` seconds pass. (A base
    class, not a typing.Protocol: lint_tree/hotpath.py.)
    """

    __slots__ = ()

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        """`/bin/sh -c SCRIPT` on this host."""
        raise NotImplementedError

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        """`/bin/sh -c SCRIPT` as a step of `job_id` (one task per node)."""
        raise NotImplementedError


def command_env(job_env: Sequence[str]) -> dict[str, str]:
    """A command's environment: the job env (`NAME=VALUE` entries, which scrun builds), or,
    as upstream, this process's own environment when the job env is empty, without Slurm's
    input variables (scrunlib.slurm_commands.command_environment: only SCRUN_* steer the job)."""
    env = dict(entry.split("=", 1) for entry in job_env if "=" in entry)
    if env:
        return env
    from scrunlib.slurm_commands import command_environment

    return command_environment(os.environ, {})


class SubprocessRunner(CommandRunner):
    """Runs commands for real. `slurm_conf` is exported as SLURM_CONF to both; `timeout`
    caps every command (the Lua runtime passes what is left of the hook's time, which may be
    less). `srun` defaults to the site's srun, looked up on first use."""

    __slots__ = ("_srun", "slurm_conf", "tell_user", "timeout")

    def __init__(
        self,
        slurm_conf: str | None = None,
        srun: str | None = None,
        timeout: float = siteconfig.DEFAULT_LUA_TIMEOUT,
        tell_user: Callable[[str], None] | None = None,
    ) -> None:
        self.slurm_conf = slurm_conf
        self.timeout = timeout
        self._srun = srun
        self.tell_user = tell_user  # where the commands' notices go (None: their output)

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        argv = ["/bin/sh", "-c", script]
        return run_command(argv, self._with_conf(env), min(timeout, self.timeout), self.tell_user)

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        try:
            srun = self._srun_path()
        except ScrunError as exc:
            return NOT_RUNNABLE, exc.message
        from scrunlib.slurm_commands import remote_command_argv

        argv = remote_command_argv(srun, job_id, script)
        return run_command(argv, self._with_conf(env), min(timeout, self.timeout), self.tell_user)

    def _with_conf(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with SLURM_CONF, scrun's slurm.conf: the srun of a remote command, and the
        Slurm commands a local one runs (scontrol, squeue), talk to scrun's cluster, which
        need not be the one Slurm's compiled-in default names (podman passes no SLURM_CONF,
        and the job env holds none)."""
        child_env = dict(env)
        if self.slurm_conf:
            child_env["SLURM_CONF"] = self.slurm_conf
        return child_env

    def _srun_path(self) -> str:
        """Found on first use only: an allocator-only script must work without Slurm."""
        if self._srun is None:
            self._srun = siteconfig.load().command("srun")
        return self._srun


def run_command(
    argv: list[str],
    env: Mapping[str, str],
    timeout: float,
    tell_user: Callable[[str], None] | None = None,
) -> tuple[int, str]:
    """Run `argv` as the real user with all of the user's ids (scrunlib.userns) through
    scrunlib.processes, output captured together; a shell's exit status (128+N for signal
    N). Its notices go to `tell_user` as they come, when given (see above)."""
    on_line = None
    if tell_user is not None:
        tell = tell_user

        def on_line(line: str) -> bool:
            if line.startswith(NOTICE_PREFIX):
                tell(line)
                return False
            return True

    try:
        wrapped, prelude = with_all_user_ids(argv)
        code, out, _ = processes.run(
            wrapped, env, timeout, merge_output=True, prelude=prelude, on_line=on_line
        )
    except processes.CannotRun as exc:
        return NOT_RUNNABLE, str(exc)
    except processes.TimedOut as exc:
        raise CommandTimeout(timeout, exc.output) from None
    except ScrunError as exc:  # with_all_user_ids: no unshare to run as the real user with
        return NOT_RUNNABLE, exc.message
    return shell_exit_code(code), out


class RecordedCall:
    """One command a RecordingRunner was asked to run (`job_id` None: an allocator command)."""

    __slots__ = ("env", "job_id", "kind", "script", "timeout")

    def __init__(
        self,
        kind: CommandKind,
        script: str,
        env: dict[str, str],
        job_id: int | None,
        timeout: float,
    ) -> None:
        self.kind = kind
        self.script = script
        self.env = env
        self.job_id = job_id
        self.timeout = timeout


def _succeed(kind: CommandKind, script: str) -> tuple[int, str]:
    return 0, ""


class RecordingRunner(CommandRunner):
    """Runs nothing: remembers each call and answers with `responder` (default: success,
    no output). For dry runs, where a script's commands must be seen but not executed."""

    __slots__ = ("calls", "responder")

    def __init__(self, responder: Responder = _succeed) -> None:
        self.responder = responder
        self.calls: list[RecordedCall] = []

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        self.calls.append(RecordedCall("allocator", script, dict(env), None, timeout))
        return self.responder("allocator", script)

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        self.calls.append(RecordedCall("remote", script, dict(env), job_id, timeout))
        return self.responder("remote", script)
