"""How `slurm.allocator_command` and `slurm.remote_command` run their shell scripts.

The Lua runtime talks to a `CommandRunner`, never to subprocess directly, so that a dry run
(scrun-lua-check, tests) can record what a script would run instead of running it.
`SubprocessRunner` is the real thing: `/bin/sh -c SCRIPT` locally, or the same through
`srun` inside the job. Unlike upstream (which waits forever) every command has a time limit,
so a hung rsync cannot keep a container in `creating` for the job's whole time limit.

On timeout the command's whole process group is killed and the runner raises
`CommandTimeout`; the Lua runtime turns that into a Lua error at the script's line (the hook
fails unless the script catches it with pcall). It never returns a made-up status, so a
script cannot mistake a killed rsync for one that finished.

Exit status: `WEXITSTATUS`, and 128+N for a child killed by signal N (upstream reports 0).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scrunlib import siteconfig
from scrunlib.errors import ScrunError, reason
from scrunlib.lua.records import CommandKind
from scrunlib.state import shell_exit_code
from scrunlib.userns import as_real_user

# Exit status reported when the command itself could not be started (a shell says the same).
NOT_RUNNABLE = 127
# After killing a timed-out command, how long to wait for its output pipe to close.
_DRAIN_SECONDS = 5.0


class CommandTimeout(Exception):
    """The command ran past its time limit and its process group was killed."""

    def __init__(self, timeout: float, output: str) -> None:
        super().__init__(f"timed out after {timeout:g} s")
        self.timeout = timeout
        self.output = output


class CommandRunner(Protocol):
    """Runs the two kinds of scrun.lua commands. Returns (exit status, stdout+stderr).

    `env` is the complete environment for the child (the job env, or the anchor's own when
    the job env is empty). Raise `CommandTimeout` when `timeout` seconds pass.
    """

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        """`/bin/sh -c SCRIPT` on this host."""
        ...

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        """`/bin/sh -c SCRIPT` as a step of `job_id` (one task per node)."""
        ...


def command_env(job_env: Sequence[str]) -> dict[str, str]:
    """A command's environment: the job env (`NAME=VALUE` entries, which scrun builds), or,
    as upstream, this process's own environment when the job env is empty, without Slurm's
    input variables (scrunlib.slurm_commands.command_environment: only SCRUN_* steer the job)."""
    env = dict(entry.split("=", 1) for entry in job_env if "=" in entry)
    if env:
        return env
    from scrunlib.slurm_commands import command_environment

    return command_environment(os.environ, {})


class SubprocessRunner:
    """Runs commands for real. `slurm_conf` is exported as SLURM_CONF to srun; `timeout`
    caps every command (the Lua runtime passes what is left of the hook's time, which may be
    less). `srun` defaults to the site's srun, looked up on first use."""

    def __init__(
        self,
        slurm_conf: str | None = None,
        srun: str | None = None,
        timeout: float = siteconfig.DEFAULT_LUA_TIMEOUT,
    ) -> None:
        self.slurm_conf = slurm_conf
        self.timeout = timeout
        self._srun = srun

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        return run_command(["/bin/sh", "-c", script], env, min(timeout, self.timeout))

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        try:
            srun = self._srun_path()
        except ScrunError as exc:
            return NOT_RUNNABLE, exc.message
        from scrunlib.slurm_commands import remote_command_argv

        child_env = dict(env)
        if self.slurm_conf:
            child_env["SLURM_CONF"] = self.slurm_conf
        argv = remote_command_argv(srun, job_id, script)
        return run_command(argv, child_env, min(timeout, self.timeout))

    def _srun_path(self) -> str:
        """Found on first use only: an allocator-only script must work without Slurm."""
        if self._srun is None:
            self._srun = siteconfig.load().command("srun")
        return self._srun


def run_command(argv: list[str], env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    """Run `argv` as the real user (scrunlib.userns) in its own process group, stdin from
    /dev/null, output captured together.

    The own process group lets a timeout kill the whole pipeline a script may have started.
    """
    try:
        proc = subprocess.Popen(
            as_real_user(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            process_group=0,
        )
    except OSError as exc:
        return NOT_RUNNABLE, f"cannot run {argv[0]}: {reason(exc)}"
    except ScrunError as exc:
        return NOT_RUNNABLE, exc.message
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # it already ended
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=_DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            # A grandchild that left the group still holds the pipe: stop reading.
            out = b""
            proc.kill()
            proc.wait()
        raise CommandTimeout(timeout, _text(out)) from None
    return shell_exit_code(proc.returncode), _text(out)


def _text(output: bytes | None) -> str:
    return (output or b"").decode("utf-8", "surrogateescape")


@dataclass
class RecordedCall:
    kind: CommandKind
    script: str
    env: dict[str, str]
    job_id: int | None
    timeout: float


Responder = Callable[[CommandKind, str], tuple[int, str]]


@dataclass
class RecordingRunner:
    """Runs nothing: remembers each call and answers with `responder` (default: success,
    no output). For dry runs, where a script's commands must be seen but not executed."""

    responder: Responder = field(default=lambda kind, script: (0, ""))
    calls: list[RecordedCall] = field(default_factory=list)

    def allocator(self, script: str, env: Mapping[str, str], timeout: float) -> tuple[int, str]:
        self.calls.append(RecordedCall("allocator", script, dict(env), None, timeout))
        return self.responder("allocator", script)

    def remote(
        self, script: str, env: Mapping[str, str], job_id: int, timeout: float
    ) -> tuple[int, str]:
        self.calls.append(RecordedCall("remote", script, dict(env), job_id, timeout))
        return self.responder("remote", script)
