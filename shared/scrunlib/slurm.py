"""Slurm's commands run for one slurm.conf (their command lines: scrunlib.slurm_commands).

Every command runs through scrunlib.processes, as the real user, with the environment
command_environment decides, and bounded (salloc excepted: a pending job waits, as podman
does); its failures become SlurmError.
"""

from __future__ import annotations

import os
import time

from scrunlib import exit_record, filecache, processes
from scrunlib.errors import SlurmError
from scrunlib.processes import Child, spawn
from scrunlib.signals import SIGINT
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm_commands import (
    EndedStep,
    cancel_argv,
    command_environment,
    config_argv,
    ended_step,
    hostnames_argv,
    job_exit_status,
    job_record_argv,
    kill_wait,
    named_steps,
    parse_scontrol_record,
    queued_job_id,
    remote_command_argv,
    revoked_job,
    salloc_argv,
    salloc_variables,
    step_states_argv,
    steps_argv,
    tagged_container,
    tagged_jobs_argv,
    user_jobs_argv,
    version_argv,
)
from scrunlib.slurm_version import SlurmVersion, parse_version, version_string
from scrunlib.userns import as_real_user

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

# Seconds a Slurm command may take (salloc excepted: a pending job waits, as podman does).
COMMAND_TIMEOUT = 60.0

# Slurm's own default KillWait, for when scontrol cannot say.
DEFAULT_KILL_WAIT = 30.0

# How often `end_steps` asks squeue again whether the steps it cancelled have ended.
STEP_POLL_SECONDS = 0.2


def _text(data: str | bytes) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _read_answer(fd: int) -> tuple[str, bytes]:
    """JOB_HOLDER's answer on the pipe `fd`: its first line ("" when the pipe is closed
    first) and the environment that follows it (`env -0`'s entries, then a newline; b""
    when there is none)."""
    data = b""
    while True:
        line, newline, rest = data.partition(b"\n")
        if newline and (rest == b"\n" or rest.endswith(b"\0\n")):
            return _text(line), rest[:-1]
        chunk = os.read(fd, 65536)
        if not chunk:
            return _text(line), b""
        data += chunk


def _cannot_run(program: str, exc: OSError) -> SlurmError:
    return SlurmError(str(processes.CannotRun(program, exc)))


def last_line(text: str) -> str:
    """The line of Slurm's output that says what went wrong, without the `salloc: ` noise."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    return errors[-1] if errors else "(no output)"


# salloc's words when accounting enforces associations and the user has none that fits
NO_ASSOCIATION = "Invalid account or account/partition combination specified"


def _refusal(message: str) -> str:
    """salloc's reason, said plainly where it is cryptic."""
    if NO_ASSOCIATION in message:
        return (
            "Slurm's accounting has no association of this user with the account and partition"
            f" asked for (or the defaults); an administrator adds one with sacctmgr ({message})"
        )
    return message


class Allocation:
    """A job of our own, held by its salloc (our child) until `release` ends it with the
    container's exit status: COMPLETED 0:0, FAILED 3:0, FAILED 0:9 in Slurm's records."""

    def __init__(
        self,
        salloc: Child,
        holder_input: int,
        job_id: int,
        nodes: str,
        variables: dict[str, str] | None,
    ) -> None:
        self.salloc, self.job_id = salloc, job_id
        self.nodes = nodes  # SLURM_JOB_NODELIST, "" when salloc did not say
        # the job's SLURM_* variables as salloc gave them to its command (salloc_variables);
        # None when the holder could not say: the job's record has them
        self.variables = variables
        self._holder_input: int | None = holder_input  # JOB_HOLDER's stdin

    def held(self) -> bool:
        """Whether salloc still holds the job."""
        return self.salloc.poll() is None

    def release(self, exit_code: int, timeout: float) -> bool:
        """Tell salloc the container's status and wait for it to end the job. False when
        salloc did not end in time, or a signal had killed it (the OOM killer, an admin):
        the job outlives a killed salloc, so the caller cancels it instead."""
        if self._holder_input is not None:
            fd, self._holder_input = self._holder_input, None
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                os.write(fd, f"{job_exit_status(exit_code)}\n".encode())
            except OSError:
                pass  # the job has ended already (scancel, time limit): salloc is going
            os.close(fd)
        code = self.salloc.wait(timeout)
        return code is not None and code >= 0

    def reap(self, timeout: float) -> None:
        """After the job was cancelled: salloc learns it and ends; one that does not, in
        `timeout` seconds, is killed with its holder (their own process group)."""
        self.salloc.end(timeout)
        if self._holder_input is not None:
            os.close(self._holder_input)
            self._holder_input = None


class Submission:
    """A container's job that salloc has submitted and Slurm has not granted yet. The answer
    pipe (`fileno`) becomes readable when the job is granted (JOB_HOLDER prints its id and
    nodes) or when salloc ends without it (refused, or ended while it waited); while it
    waits in the queue, salloc's messages name the job (`queued_job_id`)."""

    def __init__(
        self,
        slurm: Slurm,
        salloc: Child,
        container_id: str,
        holder_input: int,
        answer: int,
        messages: int,
    ) -> None:
        self.slurm, self.salloc, self.container_id = slurm, salloc, container_id
        self._holder_input, self._answer, self._messages = holder_input, answer, messages

    def fileno(self) -> int:
        return self._answer

    def messages(self) -> str:
        return _text(os.pread(self._messages, 64 * 1024, 0)) if self._messages >= 0 else ""

    def queued_job_id(self) -> int | None:
        """The job's id once Slurm has queued it without granting it at once."""
        return queued_job_id(self.messages())

    def granted(self) -> Allocation:
        """Block until salloc answers: the job's Allocation, or SlurmError saying why there
        is none (refused at submission; ended while it waited: scancel, a time limit in the
        queue). Either way the submission is over: its pipes are closed."""
        try:
            line, environment = _read_answer(self._answer)
            job_id, _, nodes = line.strip().partition(" ")
            if job_id.isdigit():
                holder_input, self._holder_input = self._holder_input, -1
                variables = salloc_variables(environment)
                return Allocation(self.salloc, holder_input, int(job_id), nodes.strip(), variables)
            code = self.salloc.end(REFUSAL_SECONDS)
            text = self.messages()
            queued = queued_job_id(text)
            if code < 0:  # killed (OOM killer, an admin): its job may wait on with no holder
                self._cancel(queued)
                job = f"job {queued}" if queued is not None else "the job"
                raise SlurmError(f"{job} cancelled: its salloc was killed (signal {-code})")
            if queued is None:
                raise SlurmError(f"allocation refused: {_refusal(last_line(text))}")
            raise SlurmError(f"job {queued} ended before it started: {last_line(text)}")
        finally:
            self._close()

    def withdraw(self) -> None:
        """Take the job back: SIGINT makes salloc revoke a pending job (one that does not end
        in time is killed). A job it did not say it revoked is cancelled: by the id salloc
        named (one scancel; a `podman rm -f` of all withdraws hundreds at once), else any
        job tagged with the container's id (a listing of the user's jobs). A job granted
        before the SIGINT (its holder's answer is on the way) is cancelled at once (salloc
        runs the holder then, and ignores SIGINT), and its salloc killed should it not end
        at once (seen in a mass removal: 10 s past the 5 s podman waits)."""
        self.salloc.signal_group(SIGINT)
        import select  # (a builtin module: no import cost to speak of)

        answer = [self._answer] if self._answer >= 0 else []  # (closed: granted() read it)
        answered = select.select(answer, [], [], REFUSAL_SECONDS if answer else 0)[0]
        granted = _read_answer(self._answer)[0].strip().partition(" ")[0] if answered else ""
        if granted.isdigit():  # cancelled: salloc, once Slurm tells it, has nothing to hold
            self.slurm.cancel(int(granted))
            self.salloc.end(CANCELLED_SECONDS)
            self._close()
            return
        self.salloc.end(REFUSAL_SECONDS)
        messages = self.messages()
        self._close()
        job_id = queued_job_id(messages)
        if job_id is None or not revoked_job(messages, job_id):
            self._cancel(job_id)

    def _cancel(self, job_id: int | None) -> None:
        """Cancel the job by the id salloc named, else any tagged with our container's id."""
        if job_id is not None:
            self.slurm.cancel(job_id)
        else:
            self.slurm.cancel_tagged(self.container_id)

    def _close(self) -> None:
        for fd in (self._holder_input, self._answer, self._messages):
            if fd >= 0:
                os.close(fd)
        self._holder_input = self._answer = self._messages = -1


# How long salloc may take to end once it has refused or revoked a job, or been told to;
# and once the job it held was cancelled (seen taking more than 10 s in a mass removal).
REFUSAL_SECONDS = 10.0
CANCELLED_SECONDS = 1.0


def cluster_name(slurm_conf: str) -> str:
    """ClusterName from slurm.conf (for SLURM_CLUSTER_NAME and slurm.CLUSTER_NAME)."""
    try:
        with open(slurm_conf, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                key, equals, value = line.partition("=")
                if equals and key.strip().lower() == "clustername" and value.split():
                    return value.split()[0]
    except OSError:
        pass
    return ""


class Slurm:
    """Runs Slurm commands for one slurm.conf, found without relying on PATH."""

    def __init__(
        self,
        site: SiteConfig,
        slurm_conf: str,
        version_cache: str | None = None,
        timeout: float | None = None,
    ):
        self.site = site
        self.slurm_conf = slurm_conf
        # seconds each command may take, unless told otherwise
        self.timeout = timeout or COMMAND_TIMEOUT
        # what every command gets on top of our environment
        self.env = {"SLURM_CONF": slurm_conf}
        self.version_cache = version_cache
        self._version: SlurmVersion | None = None

    def path(self, name: str) -> str:
        return self.site.command(name)

    def start(self, argv: Sequence[str], env: Mapping[str, str], **stdio: Any) -> Child:
        """Start `argv` with exactly `env`, which the caller builds from what scrun sets
        (the job env, SLURM_CONF, PATH): srun takes SLURM_* variables from its environment
        as options. As the real user; the caller waits for it, through the Child."""
        try:
            return processes.start(as_real_user(argv), env, **stdio)
        except processes.CannotRun as exc:
            raise SlurmError(str(exc)) from exc

    def run(self, argv: Sequence[str], timeout: float | None = None) -> tuple[int, str, str]:
        """Run to completion as the real user: (status, stdout, stderr), whatever the
        status. A command that cannot start, or is still running after `timeout` seconds
        (killed then), is a SlurmError."""
        try:
            return processes.run(
                as_real_user(argv),
                command_environment(os.environ, self.env),
                timeout or self.timeout,
            )
        except (processes.CannotRun, processes.TimedOut) as exc:
            raise SlurmError(str(exc)) from exc

    def version(self) -> SlurmVersion:
        """The Slurm version, from `srun --version`; remembered in `version_cache` (a file)
        for as long as the srun binary is the same one (path, size, modification time)."""
        if self._version is not None:
            return self._version
        srun = self.path("srun")
        key = filecache.identity(srun)
        cached = filecache.read(self.version_cache, key)
        if cached is not None:
            self._version = parse_version(cached)
            return self._version
        code, out, err = self.run(version_argv(srun), timeout=30)
        if code != 0:
            raise SlurmError(f"srun --version failed: {last_line(err or out)}")
        self._version = parse_version(out)
        filecache.write(self.version_cache, key, version_string(self._version) + "\n")
        return self._version

    def allocate(
        self,
        job_name: str,
        container_id: str,
        options: Sequence[str],
        while_waiting: Callable[[], None] | None = None,
    ) -> Allocation:
        """Submit and block until the job is granted and its nodes are ready. `while_waiting`
        runs once salloc has started, before its answer is read. Interrupted (SIGTERM while
        the job is pending), the submission is withdrawn: no job is left."""
        submission = self.submit(job_name, container_id, options)
        try:
            if while_waiting is not None:
                while_waiting()
            return submission.granted()
        except BaseException:
            submission.withdraw()
            raise

    def submit(self, job_name: str, container_id: str, options: Sequence[str]) -> Submission:
        """Start the salloc that submits the container's job and holds it once granted.
        Returns at once; the Submission tells when Slurm queued the job and granted it."""
        program = self.path("salloc")
        argv = as_real_user(salloc_argv(program, job_name, container_id, options, self.version()))
        # salloc's own lines (its job id while pending, its errors): a memory file, which
        # salloc can write to however long nobody reads (tempfile is off create's path)
        messages = os.memfd_create("salloc-messages")
        salloc_stdin, holder_input = os.pipe()
        answer, salloc_stdout = os.pipe()
        try:
            salloc = spawn(
                argv,
                command_environment(os.environ, self.env),
                stdin=salloc_stdin,
                stdout=salloc_stdout,
                stderr=messages,
                new_session=True,  # a process group to end, should it hang
            )
        except OSError as exc:
            for fd in (messages, holder_input, answer):
                os.close(fd)
            raise _cannot_run(program, exc) from exc
        finally:
            os.close(salloc_stdin)
            os.close(salloc_stdout)
        return Submission(self, salloc, container_id, holder_input, answer, messages)

    def cancel_tagged(self, container_id: str) -> None:
        """Cancel every job of ours whose comment names this container."""
        code, out, _ = self.run(tagged_jobs_argv(self.path("squeue")))
        for line in out.splitlines() if code == 0 else []:
            job, _, comment = line.strip().partition(" ")
            if tagged_container(comment) == container_id and job.isdigit():
                self.cancel(int(job))

    def end_container_job(self, job_id: int, *, existing_job: bool, step_name: str) -> None:
        """End what is a container's in Slurm: the whole job for an allocation of its own,
        only its steps (found by name) inside a job it joined (SLURM_JOB_ID), which is not
        ours to end."""
        if existing_job:
            for step_id in self.step_ids(job_id, step_name):
                self.cancel(job_id, step_id=step_id)
        else:
            self.cancel(job_id)

    def job_record(self, job_id: int) -> dict[str, str]:
        code, out, err = self.run(job_record_argv(self.path("scontrol"), job_id))
        if code != 0:
            raise SlurmError(f"job {job_id} not found: {last_line(err or out)}")
        return parse_scontrol_record(out)

    def user_jobs(self) -> str:
        """The calling user's jobs, as `user_jobs_argv` lists them (read with
        slurm_commands.user_jobs). SlurmError when squeue fails."""
        code, out, err = self.run(user_jobs_argv(self.path("squeue")))
        if code != 0:
            raise SlurmError(f"cannot list the user's jobs: {last_line(err or out)}")
        return out

    def cancel(self, job_id: int, signal: int | None = None, step_id: int | None = None) -> bool:
        """scancel; a job that already ended counts as success. False when Slurm keeps a
        signal from a step it says is not running (its job suspended): none reached it."""
        code, out, err = self.run(cancel_argv(self.path("scancel"), job_id, signal, step_id))
        text = err + out
        # "Job/step already completed", "... already completing or completed"
        if code == 0 or "already complet" in text or "Invalid job id" in text:
            return True
        if signal is not None and "Job step not running" in text:
            return False
        raise SlurmError(f"scancel {job_id} failed: {last_line(text)}")

    def step_ids(self, job_id: int, *step_names: str) -> list[int]:
        """Ids of the job's running steps named any of `step_names` (none once the job has
        ended). SlurmError when squeue cannot say."""
        code, out, err = self.run(steps_argv(self.path("squeue"), job_id, "%i %j"))
        if code != 0 and "Invalid job id" not in err + out:
            raise SlurmError(f"cannot list the steps of job {job_id}: {last_line(err or out)}")
        return named_steps(out, step_names) if code == 0 else []

    def end_steps(
        self, job_id: int, step_names: Sequence[str], timeout: float, cancel_after: float = 0.0,
        poll: float | None = None,
    ) -> bool:  # fmt: skip
        """Wait until Slurm lists none of the job's steps named any of `step_names`,
        cancelling those still listed after `cancel_after` seconds (a step that is ending
        by itself is left to end as it does: its accounting record says how). A step leaves
        the list once its tasks have ended on every node: killing its srun here does not
        end them, and whatever copies their files must wait for that. True once none is
        listed (a job that has ended has none), False when one still is after `timeout`
        seconds (its tasks may still run; asked every `poll` s, STEP_POLL_SECONDS by default).
        SlurmError when Slurm cannot be asked."""
        started = time.monotonic()
        cancelled: set[int] = set()
        while True:
            steps = self.step_ids(job_id, *step_names)
            if not steps:
                return True
            waited = time.monotonic() - started
            for step in set(steps) - cancelled if waited >= cancel_after else ():
                self.cancel(job_id, step_id=step)
                cancelled.add(step)
            if waited >= timeout:
                return False
            time.sleep(STEP_POLL_SECONDS if poll is None else poll)

    def kill_wait(self) -> float:
        """Seconds the tasks of a job Slurm is ending (a cancel, a time limit) may outlive
        its SIGTERM before its SIGKILL: slurm.conf's KillWait, DEFAULT_KILL_WAIT when
        slurmctld cannot say."""
        try:
            code, out, _ = self.run(config_argv(self.path("scontrol")))
        except SlurmError:
            return DEFAULT_KILL_WAIT
        seconds = kill_wait(out) if code == 0 else None
        return DEFAULT_KILL_WAIT if seconds is None else seconds

    def recorded_step(self, job_id: int, step_name: str) -> EndedStep | None:
        """The job's ended step named `step_name` as the accounting database recorded it
        (None without accounting or a record yet): srun reports a step the OOM killer hit,
        or one that failed on its node, as a plain failure (status 1)."""
        try:
            code, out, _ = self.run(step_states_argv(self.path("sacct"), job_id))
        except SlurmError:
            return None
        return ended_step(out, job_id, step_name) if code == 0 else None

    def recorded_exit_code(self, job_id: int, step: EndedStep, timeout: float) -> int | None:
        """The exit code the step's tasks' runtimes kept on their nodes where the OOM killer
        hid it (scrunlib.exit_record), as srun would have reported it; None unless every
        task's is there. One step of the job on the step's nodes reads and removes them
        (the job must still run)."""
        script = exit_record.read_script(job_id)
        argv = remote_command_argv(self.path("srun"), job_id, script, "scrun-exit", step.nodes)
        try:
            code, out, _ = self.run(argv, timeout=timeout)
        except SlurmError:
            return None
        codes = exit_record.step_codes(out, job_id, step.step_id) if code == 0 else {}
        return exit_record.container_code(codes, step.tasks)

    def step_nodes(self, job_id: int, step_id: int) -> list[str]:
        """The nodes of a running step, in order (its task 0 runs on the first)."""
        code, out, err = self.run(steps_argv(self.path("squeue"), job_id, "%i %N"))
        nodelist = ""
        for line in out.splitlines() if code == 0 else []:
            step, _, nodes = line.strip().partition(" ")
            if step == f"{job_id}.{step_id}":
                nodelist = nodes.strip()
        if not nodelist:
            raise SlurmError(f"step {job_id}.{step_id} is not running")
        code, out, err = self.run(hostnames_argv(self.path("scontrol"), nodelist))
        if code != 0:
            raise SlurmError(f"cannot expand node list {nodelist}: {last_line(err or out)}")
        return out.split()
