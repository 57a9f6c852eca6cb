"""SCRUN_* variables → Slurm options, checked before anything is submitted.

One table, `VARIABLES`, lists every job variable upstream scrun reads, in upstream's order:
which long option it becomes, what values it takes (scrunlib.value_kinds) and where the
option goes, the allocation (`salloc`) or the container's step (`srun --container`).
Everything else reads that table: `job_request` (what the anchor submits),
`unknown_variables` (did-you-mean hints for typos) and scrunlib.variables_doc
(docs/scrun-variables.md, kept in sync by a unit test).

Deliberate differences from upstream scrun (srun-only options go to the container step,
SCRUN_JOB_NAME names the job, stricter flag values, ...) are listed once, in the generated
document's "Differences from upstream scrun" (scrunlib.variables_doc).

Options go on the command line as one `--long=value` argv element each, so no value is ever
split, reinterpreted as another option or seen by a shell. The module needs only the
standard library: the anchor imports it on every `create`.
"""

from __future__ import annotations

from scrunlib.errors import InvalidInput
from scrunlib.log import ENV_VARIABLES as LOG_VARIABLES
from scrunlib.slurm_version import SlurmVersion, version_text
from scrunlib.value_kinds import (
    ACCTG_FREQ,
    COUNT,
    COUNT_OR_ZERO,
    EXCLUSIVE,
    FLAG,
    GPU_COUNT,
    HINT,
    LOG_LEVEL,
    MEMORY,
    NAME_LIST,
    NODES,
    OPEN_MODE,
    PATH,
    PROFILE,
    SIGNAL,
    TEXT,
    TIME,
    WORD,
    Kind,
    digits,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

DEFAULT_JOB_NAME = "scrun"


class Target:
    """Where a variable's option ends up. (Strings, not an enum: the anchor imports this
    module on every create, whose path does without enum, and re is imported only by the
    checks of variables that are set: lint_tree/hotpath.py.)"""

    ALLOCATION = "allocation"  # salloc, when scrun creates the job
    STEP = "step"  # the container's srun, in a new or an existing job
    JOB_NAME = "job name"  # JobRequest.job_name: salloc's and srun's --job-name


# ---------------------------------------------------------------------------------------
# The table.


class JobVariable:
    """One SCRUN_* job variable and the Slurm option it becomes. (The classes of this
    module are plain ones: each container's anchor imports it, see lint_tree/hotpath.py.)"""

    __slots__ = (
        "appends_with",
        "kind",
        "name",
        "note",
        "option",
        "since",
        "target",
        "until",
        "value_since",
    )

    def __init__(
        self,
        name: str,
        option: str,
        kind: Kind,
        target: str,  # a Target
        since: SlurmVersion | None = None,
        until: SlurmVersion | None = None,
        value_since: tuple[tuple[str, SlurmVersion], ...] = (),
        appends_with: str = "",
        note: str = "",
    ) -> None:
        self.name = name
        self.option = option  # the long option, e.g. "--partition"
        self.kind = kind
        self.target = target
        self.since = since  # first Slurm release with the option
        self.until = until  # first Slurm release without it
        self.value_since = value_since  # values newer than the option
        # Appended to the option's earlier value after this separator instead of setting it.
        self.appends_with = appends_with
        self.note = note


_A, _S = Target.ALLOCATION, Target.STEP
_SRUN_ONLY = "upstream rejects it (srun-only); here the container step gets it"

# Upstream's order (the order its scrun reads them). When two variables set the same option
# the later wins.
VARIABLES: tuple[JobVariable, ...] = (
    JobVariable("SCRUN_ACCOUNT", "--account", WORD, _A),
    JobVariable("SCRUN_ACCTG_FREQ", "--acctg-freq", ACCTG_FREQ, _A),
    JobVariable("SCRUN_BURST_BUFFER", "--bb", TEXT, _A),
    JobVariable("SCRUN_CLUSTER_CONSTRAINT", "--cluster-constraint", WORD, _A),
    JobVariable("SCRUN_CLUSTERS", "--clusters", NAME_LIST, _A),
    JobVariable("SCRUN_CONSTRAINT", "--constraint", TEXT, _A),
    JobVariable("SCRUN_CORE_SPEC", "--core-spec", COUNT_OR_ZERO, _A),
    JobVariable("SCRUN_CPU_BIND", "--cpu-bind", WORD, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_CPU_FREQ_REQ", "--cpu-freq", WORD, _A),
    JobVariable("SCRUN_CPUS_PER_GPU", "--cpus-per-gpu", COUNT, _A),
    JobVariable("SCRUN_CPUS_PER_TASK", "--cpus-per-task", COUNT, _A),
    JobVariable("SCRUN_DELAY_BOOT", "--delay-boot", TIME, _A),
    JobVariable("SCRUN_DEPENDENCY", "--dependency", WORD, _A),
    JobVariable("SCRUN_DISTRIBUTION", "--distribution", WORD, _A),
    JobVariable(
        "SCRUN_EPILOG", "--epilog", TEXT, _S, note=_SRUN_ONLY + "; runs where the anchor runs"
    ),
    JobVariable("SCRUN_EXACT", "--exact", FLAG, _S, note=_SRUN_ONLY),
    JobVariable(
        "SCRUN_EXCLUSIVE",
        "--exclusive",
        EXCLUSIVE,
        _A,
        value_since=(("topo", (24, 5, 0)),),
        note="empty value: `--exclusive` alone",
    ),
    JobVariable("SCRUN_GPU_BIND", "--gpu-bind", WORD, _A),
    JobVariable("SCRUN_GPU_FREQ", "--gpu-freq", WORD, _A),
    JobVariable("SCRUN_GPUS", "--gpus", GPU_COUNT, _A),
    JobVariable("SCRUN_GPUS_PER_NODE", "--gpus-per-node", GPU_COUNT, _A),
    JobVariable("SCRUN_GPUS_PER_SOCKET", "--gpus-per-socket", GPU_COUNT, _A),
    JobVariable("SCRUN_GPUS_PER_TASK", "--gpus-per-task", GPU_COUNT, _A),
    JobVariable("SCRUN_GRES_FLAGS", "--gres-flags", WORD, _A),
    JobVariable("SCRUN_GRES", "--gres", WORD, _A),
    JobVariable("SCRUN_HINT", "--hint", HINT, _A),
    JobVariable(
        "SCRUN_JOB_NAME",
        "--job-name",
        TEXT,
        Target.JOB_NAME,
        note=f"default `{DEFAULT_JOB_NAME}`; upstream always uses `{DEFAULT_JOB_NAME}`",
    ),
    JobVariable(
        "SCRUN_JOB_NODELIST",
        "--nodelist",
        WORD,
        _A,
        note="the job's node list, so the nodes are asked for in the allocation; upstream "
        "rejects it (it is srun's view of an existing allocation)",
    ),
    JobVariable("SCRUN_JOB_NUM_NODES", "--nodes", NODES, _A),
    JobVariable("SCRUN_LABELIO", "--label", FLAG, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_MEM_BIND", "--mem-bind", WORD, _A),
    JobVariable("SCRUN_MEM_PER_CPU", "--mem-per-cpu", MEMORY, _A),
    JobVariable("SCRUN_MEM_PER_GPU", "--mem-per-gpu", MEMORY, _A),
    JobVariable("SCRUN_MEM_PER_NODE", "--mem", MEMORY, _A),
    JobVariable("SCRUN_MPI_TYPE", "--mpi", WORD, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_NCORES_PER_SOCKET", "--cores-per-socket", COUNT, _A),
    JobVariable("SCRUN_NETWORK", "--network", WORD, _A),
    JobVariable("SCRUN_NSOCKETS_PER_NODE", "--sockets-per-node", COUNT, _A),
    JobVariable(
        "SCRUN_NTASKS",
        "--ntasks",
        COUNT,
        _A,
        note="sizes the job; Slurm 22.05 runs at most one container task per node",
    ),
    JobVariable("SCRUN_NTASKS_PER_CORE", "--ntasks-per-core", COUNT, _A),
    JobVariable("SCRUN_NTASKS_PER_GPU", "--ntasks-per-gpu", COUNT, _A),
    JobVariable("SCRUN_NTASKS_PER_NODE", "--ntasks-per-node", COUNT, _A),
    JobVariable("SCRUN_NTASKS_PER_TRES", "--ntasks-per-tres", COUNT, _A),
    JobVariable(
        "SCRUN_OPEN_MODE",
        "--open-mode",
        OPEN_MODE,
        _S,
        note="upstream rejects it (not a salloc option); srun has it",
    ),
    JobVariable("SCRUN_OVERCOMMIT", "--overcommit", FLAG, _A),
    JobVariable("SCRUN_OVERLAP", "--overlap", FLAG, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_PARTITION", "--partition", NAME_LIST, _A),
    JobVariable("SCRUN_POWER", "--power", WORD, _A, until=(24, 5, 0)),
    JobVariable("SCRUN_PROFILE", "--profile", PROFILE, _A),
    JobVariable(
        "SCRUN_PROLOG", "--prolog", TEXT, _S, note=_SRUN_ONLY + "; runs where the anchor runs"
    ),
    JobVariable("SCRUN_QOS", "--qos", NAME_LIST, _A),
    JobVariable("SCRUN_REMOTE_CWD", "--chdir", PATH, _A, note="SCRUN_WORKING_DIR wins"),
    JobVariable(
        "SCRUN_REQ_SWITCH", "--switches", COUNT, _A, note="the count of `--switches=count[@time]`"
    ),
    JobVariable("SCRUN_RESERVATION", "--reservation", NAME_LIST, _A),
    JobVariable("SCRUN_SIGNAL", "--signal", SIGNAL, _A),
    JobVariable(
        "SCRUN_SLURMD_DEBUG",
        "--slurmd-debug",
        LOG_LEVEL,
        _S,
        note=_SRUN_ONLY + "; Slurm ≥ 23.02 allows it only for root and SlurmUser",
    ),
    JobVariable("SCRUN_SPREAD_JOB", "--spread-job", FLAG, _A),
    JobVariable("SCRUN_TASK_EPILOG", "--task-epilog", TEXT, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_TASK_PROLOG", "--task-prolog", TEXT, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_THREAD_SPEC", "--thread-spec", COUNT, _A),
    JobVariable("SCRUN_THREADS_PER_CORE", "--threads-per-core", COUNT, _A),
    JobVariable(
        "SCRUN_THREADS", "--threads", COUNT, _S, note=_SRUN_ONLY + " (srun's launch fan-out)"
    ),
    JobVariable("SCRUN_TIMELIMIT", "--time", TIME, _A),
    JobVariable("SCRUN_TRES_BIND", "--tres-bind", WORD, _A, since=(23, 11, 0)),
    JobVariable("SCRUN_TRES_PER_TASK", "--tres-per-task", WORD, _A, since=(23, 2, 0)),
    JobVariable("SCRUN_UNBUFFEREDIO", "--unbuffered", FLAG, _S, note=_SRUN_ONLY),
    JobVariable("SCRUN_USE_MIN_NODES", "--use-min-nodes", FLAG, _A),
    JobVariable(
        "SCRUN_WAIT4SWITCH",
        "--switches",
        TIME,
        _A,
        appends_with="@",
        note="the time of `--switches=count[@time]`; needs SCRUN_REQ_SWITCH",
    ),
    JobVariable("SCRUN_WCKEY", "--wckey", WORD, _A),
    JobVariable("SCRUN_WORKING_DIR", "--chdir", PATH, _A, note="wins over SCRUN_REMOTE_CWD"),
)

OUTPUT_VARIABLES = (
    "SCRUN_OCI_VERSION",
    "SCRUN_CONTAINER_ID",
    "SCRUN_PID",
    "SCRUN_BUNDLE",
    "SCRUN_SUBMISSION_BUNDLE",
    "SCRUN_PID_FILE",
    "SCRUN_SOCKET",
    "SCRUN_SPOOL_DIR",
    "SCRUN_SUBMISSION_CONFIG_FILE",
    "SCRUN_USER",
    "SCRUN_USER_ID",
    "SCRUN_GROUP",
    "SCRUN_GROUP_ID",
    "SCRUN_ROOT",
    "SCRUN_ROOTFS_PATH",
    "SCRUN_SUBMISSION_ROOTFS_PATH",
    "SCRUN_LOG_FILE",
    "SCRUN_LOG_FORMAT",
)
ANNOTATION_PREFIX = "SCRUN_ANNOTATION_"
# Whether a container whose job waits in the queue says so on its stderr (the site's
# `pending_notice` decides when); 0 silences it for one container.
PENDING_NOTICES = "SCRUN_PENDING_NOTICES"
# SCRUN_* names read elsewhere: logging (scrunlib.log) and the site configuration file.
_OTHER_INPUTS = (*LOG_VARIABLES, "SCRUN_SITE_CONFIG", PENDING_NOTICES)


def pending_notices(env: Mapping[str, str]) -> bool:
    """SCRUN_PENDING_NOTICES: 1 (the default) or 0; anything else is an InvalidInput."""
    value = env.get(PENDING_NOTICES, "1").strip().lower()
    if value in ("1", "yes", "true", "on", ""):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise InvalidInput(f"{PENDING_NOTICES}={env[PENDING_NOTICES]!r}: give 1 or 0")


# ---------------------------------------------------------------------------------------
# Turning an environment into a job request.


class JobRequest:
    """What the anchor asks Slurm for, from the SCRUN_* variables and SLURM_JOB_ID."""

    __slots__ = ("allocation_args", "existing_job_id", "ignored_variables", "job_name", "step_args")

    def __init__(
        self,
        job_name: str,
        allocation_args: tuple[str, ...],
        step_args: tuple[str, ...],
        existing_job_id: int | None,
        ignored_variables: tuple[str, ...] = (),
    ) -> None:
        self.job_name = job_name  # SCRUN_JOB_NAME or "scrun"
        self.allocation_args = allocation_args  # salloc's; empty when the job already exists
        self.step_args = step_args  # srun options for the container step
        self.existing_job_id = existing_job_id  # SLURM_JOB_ID: run in that job, never end it
        # Allocation variables that were set but have no effect because the job already exists.
        self.ignored_variables = ignored_variables

    def _fields(self) -> tuple[object, ...]:  # a value: equal when all its fields are
        return (
            self.job_name,
            self.allocation_args,
            self.step_args,
            self.existing_job_id,
            self.ignored_variables,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRequest) and self._fields() == other._fields()

    def __repr__(self) -> str:
        return f"JobRequest{self._fields()!r}"


def merge_environment(
    caller_env: Mapping[str, str], container_env: Sequence[str]
) -> dict[str, str]:
    """scrun's view of the environment: the caller's, overridden by config.json `process.env`.

    Upstream `setenv()`s every `NAME=VALUE` of the container into its own environment, so
    `podman run -e SCRUN_PARTITION=x` and `-e SLURM_JOB_ID=…` work; later duplicates win.
    """
    merged = dict(caller_env)
    for entry in container_env:
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise InvalidInput(
                f"invalid config.json process.env entry {entry!r}: expected NAME=VALUE"
            )
        merged[name] = value
    return merged


def job_request(env: Mapping[str, str], slurm_version: SlurmVersion) -> JobRequest:
    """Check every SCRUN_* job variable in `env` and turn them into Slurm options.

    Raises InvalidInput naming the first bad variable, its value and the reason. Variables
    are checked even when SLURM_JOB_ID selects an existing job (their allocation options are
    then dropped and listed in `ignored_variables`): a typo should fail the same way in both
    modes.
    """
    existing_job_id = _existing_job_id(env.get("SLURM_JOB_ID", ""))
    job_name = DEFAULT_JOB_NAME
    options: dict[str, dict[str, str]] = {_A: {}, _S: {}}
    for variable in VARIABLES:
        raw = env.get(variable.name)
        if raw is None:
            continue
        value = _checked(variable, raw, slurm_version)
        if value is None:
            continue
        if variable.target == Target.JOB_NAME:
            job_name = value
            continue
        chosen = options[variable.target]
        if variable.appends_with:
            if variable.option not in chosen:
                base = next(v.name for v in VARIABLES if v.option == variable.option)
                raise InvalidInput(
                    f"{variable.name}={raw!r} needs {base}: alone it gives no {variable.option}"
                )
            value = chosen[variable.option] + variable.appends_with + value
        chosen[variable.option] = value
    allocation_args = tuple(_argv(options[_A]))
    ignored: tuple[str, ...] = ()
    if existing_job_id is not None:
        ignored = allocation_variables(env)
        allocation_args = ()
    return JobRequest(
        job_name, allocation_args, tuple(_argv(options[_S])), existing_job_id, ignored
    )


def allocation_variables(env: Mapping[str, str]) -> tuple[str, ...]:
    """The names of the allocation's (salloc's) variables set in `env`, in table order."""
    return tuple(v.name for v in VARIABLES if v.target == _A and v.name in env)


def _existing_job_id(text: str) -> int | None:
    if not text:
        return None
    number = digits(text)
    if number is None or not 0 < number <= 0xFFFFFFFF:
        raise InvalidInput(f"invalid SLURM_JOB_ID={text!r}: must be a job number")
    return number


def _checked(variable: JobVariable, raw: str, version: SlurmVersion) -> str | None:
    """The variable's value as it goes on the command line, or None for "leave it out"."""
    try:
        value = variable.kind.check(raw)
    except ValueError as exc:
        raise InvalidInput(f"invalid {variable.name}={raw!r}: {exc}") from None
    if value is None:
        return None
    found = version_text(version)
    if variable.since and version < variable.since:
        raise InvalidInput(
            f"{variable.name} needs Slurm ≥ {version_text(variable.since)} (found {found})"
        )
    if variable.until and version >= variable.until:
        raise InvalidInput(
            f"{variable.name} needs Slurm < {version_text(variable.until)} (found {found}): "
            f"{variable.option} was removed in {version_text(variable.until)}"
        )
    for newer_value, since in variable.value_since:
        if value == newer_value and version < since:
            raise InvalidInput(
                f"{variable.name}={raw!r} needs Slurm ≥ {version_text(since)} (found {found})"
            )
    return value


def _argv(options: Mapping[str, str]) -> list[str]:
    return [f"{option}={value}" if value else option for option, value in options.items()]


def unknown_variables(env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """SCRUN_* names in `env` that scrun does not read, each with the job variables it looks
    like a typo of (possibly none). Unknown names are not errors; the anchor logs these."""
    known = {variable.name for variable in VARIABLES} | set(OUTPUT_VARIABLES)
    known |= set(_OTHER_INPUTS)
    unknown = [
        name
        for name in sorted(env)
        if name.startswith("SCRUN_")
        and name not in known
        and not name.startswith(ANNOTATION_PREFIX)
    ]
    if not unknown:
        return {}
    from difflib import get_close_matches  # only when there is a typo to look for

    job_names = [variable.name for variable in VARIABLES]
    return {name: tuple(get_close_matches(name, job_names, n=3, cutoff=0.8)) for name in unknown}
