"""Slurm's command lines, composed as argument lists (no value ever reaches a shell), and
the reading of their output: pure functions, unit-tested without Slurm
(tests/unit/test_slurm_commands.py). scrunlib.slurm runs them.

Everything version-specific lives here: Slurm 22.05 (Debian 12) has no `--container-id`
and runs at most one task per node in a container step; 23.02+ tags the step with the
container id so `squeue`/`scontrol` show it.
"""

from __future__ import annotations

from scrunlib.errors import InvalidInput
from scrunlib.slurm_version import SlurmVersion, supports_container_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# Slurm's commands take options from these input variables (SALLOC_PARTITION,
# SQUEUE_FORMAT, SCANCEL_SIGNAL, SLURM_TIMELIMIT, ...). Only SCRUN_* variables steer a
# container's job, as with upstream's scrun, which calls Slurm's API: these are removed from
# the environment of every Slurm command scrun runs (`command_environment`).
SLURM_INPUT_PREFIXES = (
    "SALLOC_",
    "SBATCH_",
    "SRUN_",
    "SQUEUE_",
    "SCANCEL_",
    "SCONTROL_",
    "SINFO_",
    "SACCT_",
    "SLURM_",
)


def command_environment(environ: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The environment of a Slurm command: `environ` without Slurm's input variables, plus
    `own`, what scrun sets itself (SLURM_CONF; for a step, the job's SLURM_* variables). The
    one place that decides what of the caller's environment reaches Slurm."""
    env = {
        name: value for name, value in environ.items() if not name.startswith(SLURM_INPUT_PREFIXES)
    }
    env.update(own)
    return env


JOB_TAG_PREFIX = "scrun:"


def job_tag(container_id: str) -> str:
    """The comment every job scrun allocates carries (`salloc --comment`), so the job of a
    container can be found (and cancelled) before salloc has told us its id."""
    return JOB_TAG_PREFIX + container_id


def tagged_container(comment: str) -> str | None:
    """The container id a job's comment names, None when it is not scrun's tag."""
    return comment.removeprefix(JOB_TAG_PREFIX) if comment.startswith(JOB_TAG_PREFIX) else None


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The keys of `scontrol -o show job` records (Slurm 22.05 to 26.05), and those whose values
# are free text, which may hold spaces and even `word=word` (a job named "train gpt", a
# comment). A free-text value runs on to the next known key; any other value ends at the
# next token that looks like `Key=` (a key newer Slurm added included).
JOB_RECORD_KEYS = _words(
    "JobId ArrayJobId ArrayTaskId ArrayTaskThrottle HetJobId HetJobOffset HetJobIdSet JobName "
    "UserId GroupId MCS_label Priority Nice Account QOS JobState Reason Dependency Requeue "
    "Restarts BatchFlag Reboot ExitCode DerivedExitCode RunTime TimeLimit TimeMin SubmitTime "
    "EligibleTime AccrueTime StartTime EndTime Deadline PreemptEligibleTime PreemptTime "
    "SuspendTime SecsPreSuspend LastSchedEval ResizeTime Scheduler Partition AllocNode:Sid "
    "ReqNodeList ExcNodeList NodeList SchedNodeList BatchHost NumNodes NumCPUs NumTasks "
    "CPUs/Task ReqB:S:C:T TRES ReqTRES AllocTRES Socks/Node NtasksPerN:B:S:C CoreSpec "
    "MinCPUsNode MinMemoryNode MinMemoryCPU MinTmpDiskNode Features Prefer DelayBoot "
    "OverSubscribe Contiguous Licenses LicensesAlloc Network Command WorkDir AdminComment "
    "SystemComment Comment StdErr StdIn StdOut Power Container ContainerID CpusPerTres "
    "MemPerTres TresBind TresFreq TresPerJob TresPerNode TresPerSocket TresPerTask MailUser "
    "MailType NtasksPerTRES CPU_Bind_Type Reservation BurstBuffer BurstBufferState CpuFreqMin "
    "CpuFreqMax CpuFreqGov OOMKillStep ResvPorts SegmentSize StepMgrEnabled Clusters "
    "ClusterFeatures Switches Wait4Switch SubmitLine Exclusive ContainerType"
)
FREE_TEXT_KEYS = _words(
    "JobName Comment AdminComment SystemComment Command WorkDir StdErr StdIn StdOut Reason "
    "Features Prefer Dependency Licenses Network MailUser Container Reservation BurstBuffer "
    "ClusterFeatures SubmitLine"
)
_KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/:")


def parse_scontrol_record(text: str) -> dict[str, str]:
    """The first record of `scontrol -o show job` output (one line of Key=Value fields,
    separated by spaces) → dict. A value ends where the next field begins (see
    JOB_RECORD_KEYS), so values with spaces are whole; trailing spaces are dropped."""
    line = next((line for line in text.splitlines() if line.strip()), "")
    record: dict[str, str] = {}
    key: str | None = None
    for token in line.split(" "):
        name, sep, value = token.partition("=")
        looks_like_key = bool(sep and name[:1].isalpha() and _KEY_CHARACTERS.issuperset(name))
        if looks_like_key and (name in JOB_RECORD_KEYS or key not in FREE_TEXT_KEYS):
            key = name
            record[key] = value
        elif key is not None:
            record[key] += " " + token
    return {name: value.rstrip() for name, value in record.items()}


# The working directory of scrun's steps on the node (they use absolute paths only). srun's
# default, its own cwd, may exist only in the caller's mount namespace (rootless dockerd's
# shim runs in the bundle under rootlesskit's private /run). Slurm 24.11 then fails a
# container step and prints "couldn't chdir" into a plain step's stderr (22.05: the reverse).
NODE_CWD = "/"

# For the container's step and exec's: srun quiet down to its fatal messages. Each --quiet
# lowers srun's stderr log level by one from info (Slurm 22.05 to 26.05 alike): one drops
# its notes, two also its error lines, among them "srun: error: NODE: task 0: Exited with
# exit code N" (or ": Killed", ": Out Of Memory") after every failing container, which
# crun does not print and whose code the caller gets anyway. The task's own stderr passes
# untouched. Lost with them: srun's reason for a step Slurm refused (the code is then 1).
STEP_QUIET = ("--quiet", "--quiet")

# For the same steps, in srun's environment: slurmstepd writes "*** STEP J.S ON NODE CANCELLED
# AT ... ***" (and "... DUE TO TIME LIMIT ***") into a step's stderr, the container's, when
# the step is cancelled or its job ends, from the node with this index in the step (0 unless
# set); no step has a node of this one. The anchor says itself why Slurm ended a job.
STEP_QUIET_ENV = {"SLURM_STEP_KILLED_MSG_NODE_ID": "2147483646"}


class StepCommand:
    """Everything that goes into the container's `srun` line."""

    __slots__ = ("args", "bundle", "container_id", "extra_args", "job_id", "job_name", "pty")

    def __init__(
        self,
        job_id: int,
        bundle: str,
        args: Sequence[str],
        container_id: str,
        job_name: str = "scrun",
        pty: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.job_id, self.bundle, self.args = job_id, bundle, args
        self.container_id, self.job_name, self.pty = container_id, job_name, pty
        self.extra_args = extra_args


def step_argv(srun: str, step: StepCommand, version: SlurmVersion) -> list[str]:
    """The container step: `srun --jobid J --container B ... -- args`."""
    # --export=NONE: the container's environment is its config.json's (slurmstepd adds the
    # job's SLURM_* variables); and srun does not resolve the command against the host PATH.
    argv = [
        srun,
        "--jobid",
        str(step.job_id),
        "--job-name",
        step.job_name,
        *STEP_QUIET,
        "--export=NONE",
        "--container",
        step.bundle,
        f"--chdir={NODE_CWD}",
    ]
    if supports_container_id(version):
        argv += ["--container-id", step.container_id]
    if step.pty:
        argv.append("--pty")
    argv += list(step.extra_args)
    argv.append("--")
    argv += list(step.args)
    return argv


# the name of `scrun exec`'s steps
EXEC_STEP_NAME = "scrun-exec"


def container_step_names(step_name: str, existing_job: bool) -> tuple[str, ...]:
    """The names of a container's steps, whose tasks are the container's processes: its
    own (`step_name`) and, in a job of its own, its exec steps (in a job it joined, another
    container's exec steps carry the same name)."""
    return (step_name,) if existing_job else (step_name, EXEC_STEP_NAME)


def steps_argv(squeue: str, job_id: int, fields: str) -> list[str]:
    """`squeue` listing the running steps of a job, one line each: `fields` (squeue's -o
    format; the step id first). An ended or unknown job has none."""
    return [squeue, "-h", "-s", "-j", str(job_id), "-o", fields]


def named_steps(listing: str, step_names: Sequence[str]) -> list[int]:
    """The step numbers, in `steps_argv(..., "%i %j")` output, of the steps named any of
    `step_names` (a name may hold spaces)."""
    steps = []
    for line in listing.splitlines():
        step, _, name = line.strip().partition(" ")
        _, _, number = step.partition(".")
        if name in step_names and number.isdigit():
            steps.append(int(number))
    return steps


def exec_argv(srun: str, job_id: int, node: str, command: str, *, pty: bool) -> list[str]:
    """`scrun exec`: one task on `node`, beside the container's step (--overlap), running
    `command` (the node's OCI runtime entering the container) under /bin/sh."""
    argv = [srun, "--jobid", str(job_id), "--job-name", EXEC_STEP_NAME, *STEP_QUIET, "--overlap"]
    argv += ["--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--chdir={NODE_CWD}"]
    if pty:
        argv.append("--pty")
    return [*argv, "--", "/bin/sh", "-c", command]


def remote_command_argv(
    srun: str, job_id: int, script: str, job_name: str = "lua-command", nodes: str | None = None
) -> list[str]:
    """`slurm.remote_command` (and scrunlib.nodecheck's check): the script on every node
    of the job, one task each, in NODE_CWD (scrun's own cwd is this host's). `nodes`: the
    job's node list, which srun needs for that when its environment is not the job's (it
    then runs one task on the first node only)."""
    argv = [
        srun,
        "--jobid",
        str(job_id),
        "--quiet",
        "--job-name",
        job_name,
        "--ntasks-per-node=1",
        "--overlap",
        f"--chdir={NODE_CWD}",
    ]
    if nodes:
        argv.append(f"--nodelist={nodes}")
    return [*argv, "--", "/bin/sh", "-c", script]


# What salloc runs for the container's life (salloc ends the job with its exit status):
# print the job id and its nodes once they are ready, then the environment salloc gave it
# (NUL-separated, then a newline: the job's SLURM_* variables, scrunlib.jobenv, so no
# `scontrol show job` is needed), then wait for the container's status on stdin, `N` (exit
# N) or `-N` (killed by signal N). EOF (the anchor died) leaves the job to `scrun delete`. A
# job ended by Slurm (scancel, time limit) ends this shell and keeps its state.
JOB_HOLDER = (
    'echo "$SLURM_JOB_ID $SLURM_JOB_NODELIST"; /usr/bin/env -0; echo; exec >/dev/null; '
    "read status || exec sleep 2147483647; "
    'case $status in -*) kill -"${status#-}" $$ ;; esac; exit "$status"'
)


def salloc_variables(environment: bytes) -> dict[str, str] | None:
    """The job's SLURM_* variables from the environment salloc gave the job holder
    (`env -0`'s NUL-terminated entries): its output variables (SLURM_JOB_ID,
    SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, …), as Slurm gives any command of a job.
    scrun passes salloc no SLURM_* variable but SLURM_CONF (command_environment), which
    is left out: each command gets scrun's own. None when there is no SLURM_JOB_ID (the
    holder could not say): the caller reads the job's record instead."""
    env = {}
    for entry in environment.split(b"\0"):
        name, equals, value = entry.decode(errors="replace").partition("=")
        if equals and name.startswith("SLURM_") and name != "SLURM_CONF":
            env[name] = value
    return env if env.get("SLURM_JOB_ID", "").isdigit() else None


def salloc_argv(
    salloc: str, job_name: str, container_id: str, options: Sequence[str], version: SlurmVersion
) -> list[str]:
    """A new allocation held by salloc running JOB_HOLDER, tagged with the container id."""
    argv = [
        salloc,
        "--wait-all-nodes=1",
        # without it, salloc waits for the holder for ever once scancel or a time limit
        # has ended the job; with it, the holder gets SIGTERM and salloc goes
        "--kill-command=TERM",
        f"--job-name={job_name}",
        f"--comment={job_tag(container_id)}",
    ]
    if supports_container_id(version):
        argv.append(f"--container-id={container_id}")
    return [*argv, *options, "--", "/bin/sh", "-c", JOB_HOLDER]


def job_exit_status(exit_code: int) -> str:
    """What JOB_HOLDER reads for the container's exit code: 128+N (a shell's report of
    signal N) as the signal itself, so the job's record says 0:N, not 128+N:0."""
    if 128 < exit_code <= 128 + 64:
        return f"-{exit_code - 128}"
    return str(exit_code)


def cancel_argv(
    scancel: str, job_id: int, signal: int | None = None, step_id: int | None = None
) -> list[str]:
    """`scancel` of a job, a step or a signal to either. --quiet only for a plain job
    cancel, which succeeds on a job that is ending or gone: a step's cancel or a signal
    then fails (exit 1) either way, and only scancel's message ("Invalid job id
    specified") tells that from other failures (Slurm.cancel reads it)."""
    target = f"{job_id}.{step_id}" if step_id is not None else str(job_id)
    if signal is not None:
        return [scancel, f"--signal={signal}", target]
    return [scancel, target] if step_id is not None else [scancel, "--quiet", target]


def version_argv(srun: str) -> list[str]:
    """`srun --version`: `slurm 22.05.8` (scrunlib.slurm_version reads it)."""
    return [srun, "--version"]


def tagged_jobs_argv(squeue: str) -> list[str]:
    """`squeue` listing the user's jobs, `ID COMMENT` a line (`tagged_container` reads the
    comment)."""
    return [squeue, "-h", "-o", "%i %k"]


def user_jobs_argv(squeue: str) -> list[str]:
    """`squeue` listing the calling user's jobs, `ID STATE REASON` a line (`user_jobs`
    reads it): one query for all of a user's queued containers (scrunlib.user_queue)."""
    return [squeue, "--me", "-h", "-o", "%i %T %r"]


def user_jobs(listing: str) -> dict[int, tuple[str, str]]:
    """`user_jobs_argv` output → {job id: (state, reason)}; the reason "" where Slurm says
    None. Lines that name no plain job (an array's `12_3`) are skipped."""
    jobs = {}
    for line in listing.splitlines():
        words = line.strip().split(" ", 2)
        if len(words) >= 2 and words[0].isdigit():
            reason = words[2].strip() if len(words) == 3 else ""
            jobs[int(words[0])] = (words[1], "" if reason == "None" else reason)
    return jobs


def queued_job_id(messages: str) -> int | None:
    """The job id in salloc's `Pending job allocation N` (a job queued, not granted at
    once), None when there is none."""
    marker = "Pending job allocation "
    at = messages.find(marker)
    if at < 0:
        return None
    words = messages[at + len(marker) :].split(maxsplit=1)
    return int(words[0]) if words and words[0].isdigit() else None


def revoked_job(messages: str, job_id: int) -> bool:
    """Whether salloc's messages say it revoked job `job_id` (`Job allocation N has been
    revoked.`, once slurmctld has taken the pending job back on salloc's SIGINT)."""
    return f"Job allocation {job_id} has been revoked" in messages


def config_argv(scontrol: str) -> list[str]:
    """`scontrol show config`: slurmctld's configuration, `Name = value` a line."""
    return [scontrol, "show", "config"]


def kill_wait(config: str) -> float | None:
    """KillWait's seconds in `scontrol show config`'s output (`KillWait = 30 sec`); None
    when it is not there."""
    for line in config.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "KillWait":
            number = (value.split() or [""])[0]
            return float(number) if number.isdigit() else None
    return None


def job_record_argv(scontrol: str, job_id: int) -> list[str]:
    """`scontrol` printing the job's record on one line (`parse_scontrol_record`)."""
    return [scontrol, "-o", "show", "job", str(job_id)]


def step_states_argv(sacct: str, job_id: int) -> list[str]:
    """`sacct` listing the job's steps from accounting, in order, a line each:
    `JOBID.STEP|NAME|STATE|TASKS|NODES` (read by `ended_step`)."""
    return [sacct, "-n", "-P", "-j", str(job_id), "-o", "JobID,JobName,State,NTasks,NodeList"]


class EndedStep:
    """A step as accounting recorded it: its number, state (`OUT_OF_MEMORY`, `COMPLETED`,
    ...), how many tasks it had and on which nodes (a Slurm node list)."""

    __slots__ = ("nodes", "state", "step_id", "tasks")

    def __init__(self, step_id: int, state: str, tasks: int, nodes: str) -> None:
        self.step_id, self.state, self.tasks, self.nodes = step_id, state, tasks, nodes


def ended_step(listing: str, job_id: int, step_name: str) -> EndedStep | None:
    """The last of job `job_id`'s steps named `step_name` in step_states_argv's output (a
    container's own: the job's steps are in order), None when accounting has none."""
    found = None
    for line in listing.splitlines():
        fields = line.split("|")
        if len(fields) != 5 or fields[1] != step_name:
            continue
        job, _, step = fields[0].partition(".")
        if job == str(job_id) and step.isdigit():
            tasks = int(fields[3]) if fields[3].isdigit() else 0
            found = EndedStep(int(step), fields[2].split(" ")[0], tasks, fields[4])
    return found


def hostnames_argv(scontrol: str, nodelist: str) -> list[str]:
    """`scontrol` expanding a node list (`n[1-2]`) into its names, one a line."""
    return [scontrol, "show", "hostnames", nodelist]


def time_limit_argv(scontrol: str, job_id: int, time_limit: str) -> list[str]:
    """`scontrol update` of the job's time limit (as Slurm writes one: `1:00:00`, `30`)."""
    if not time_limit.strip() or any(char.isspace() or char == "=" for char in time_limit):
        raise InvalidInput(f"update: invalid time limit {time_limit!r}")
    return [scontrol, "update", f"JobId={job_id}", f"TimeLimit={time_limit}"]
