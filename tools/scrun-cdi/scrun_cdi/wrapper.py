"""scrun-cdi-run: oci.conf's RunTimeRun on a compute node. It gives the container step the GPUs
Slurm allocated to it, from the node's own CDI spec, and resource limits the node can give
(scrun_cdi.rlimits), then runs the runtime (crun), and keeps the container's exit code where
Slurm would hide it:

    RunTimeRun="exec scrun-cdi-run --bundle %b -- crun ... run --bundle %b %n.%u.%j.%s.%t"
    (Slurm 22.05: scrun-cdi-run --bundle %b --job %j --node %n -- ...; see scrunlib.cdi)

and scrun exec's command on the node (the site's exec_command, or the one scrun derives
from oci.conf when RunTimeRun runs scrun-cdi-run; scrunlib.exec_process), without options:

    exec_command = "scrun-cdi-run -- crun ... exec %o %n.%u.%j.%s.%t"

An exec gets no GPUs (it enters a container that has them) and keeps no exit code: it only
tells a program crun could not start from crun's failure, and hands signals on, as below.

The config crun gets is written to a memory file (/proc/self/fd/N, crun's --config), so
nothing is written to the node and Slurm's per-step copy of the config.json is left as it is.
A step without GPUs whose limits the node can give runs the runtime unchanged, before any
spec is read (reading the limits costs ~1.5 ms a step: scrunlib.leanjson, not json). An
error is one line on the step's stderr (`scrun-cdi-run: error: node n1:
/etc/cdi/nvidia.json: ...`), exit 1, and no container is started.

It stays the runtime's parent (scrunlib.processes.hand_over) and exits as it did: its exit
code, the container's main process's (or its signal). crun exits 1 too when it cannot start
the container's process (`crun exec`: 1 or 255), where podman and docker, which create and start
it apart, report 127 (the program is not there) or 126 (it cannot be run): crun gets a log
of its own errors (`--log`, a memory file), and that exit code with an error in the log
becomes 127 or 126 as podman tells them apart (crun has printed the error on the step's
stderr too). The same code without an error logged is the process's own, and stays.

When the OOM killer killed a process of the task meanwhile, Slurm reports the task as out
of memory whatever that code was, so it is kept on the node for the anchor first
(scrunlib.exit_record). From the start (scrun_cdi.main) signals wait, and the runtime gets
them once it runs: slurmstepd signals every process of the step (`podman stop`), and one
that came while this wrapper prepared would otherwise end it, or crun before it is ready,
instead of reaching the container.

The nodes need only Python's standard library (PyYAML for YAML specs); not a hot path of
scrun's, but every container step of the node passes through it: argparse is not imported.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from scrunlib import cdi, exit_record, leanjson, processes, signals
from scrunlib.errors import print_error

from scrun_cdi import rlimits

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "scrun-cdi-run"
SCONTROL_TIMEOUT = 30.0
_FORMS = (
    f"{PROGRAM} --bundle DIR [--kind KIND] [--cdi-dir DIR]... [--job JOBID --node NODE] "
    "-- RUNTIME [OPTION]... run [OPTION]... NAME",
    f"{PROGRAM} -- RUNTIME [OPTION]... exec [OPTION]... NAME COMMAND [ARG]...",
)
USAGE = f"usage: {_FORMS[0]}\n   or: {_FORMS[1]}"  # --help's
USAGE_LINE = f"usage: {_FORMS[0]}; or: {_FORMS[1]}"  # an error's: one line
# crun's exit codes when it could not start the container's process, by command (`exec`:
# 255 from crun 1.8.1 and 1.21, 1 from 1.28)
_FAILED = {"run": (1,), "exec": (1, 255)}


class Options:
    def __init__(self) -> None:
        self.bundle = ""
        self.kind = cdi.DEFAULT_KIND
        self.spec_dirs: list[str] = []
        self.job = ""
        self.node = ""
        self.runtime: list[str] = []
        self.command = ""  # the runtime's: run or exec


def parse(argv: Sequence[str]) -> Options:
    options = Options()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            options.runtime = args
            break
        name, has_value, value = arg.partition("=")
        if name not in ("--bundle", "--kind", "--cdi-dir", "--job", "--node"):
            raise cdi.CdiError(f"unknown option {arg!r}; {USAGE_LINE}")
        if not has_value:
            if not args:
                raise cdi.CdiError(f"{name} needs a value; {USAGE_LINE}")
            value = args.pop(0)
        if name == "--cdi-dir":
            options.spec_dirs.append(value)
        else:
            setattr(options, name[2:], value)  # bundle, kind, job, node
    # the first of them: a later one is a word of the process's command line
    options.command = next((a for a in options.runtime[1:] if a in _FAILED), "")
    if not options.command or bool(options.bundle) != (options.command == "run"):
        raise cdi.CdiError(USAGE_LINE)
    return options


def job_gpus(job: str, node: str) -> list[int]:
    """22.05: the node's GPUs of the job, from its record (the step has all of them: scrun
    runs one container step a job)."""
    argv = ["scontrol", "show", "job", "-d", job]
    try:
        code, out, err = processes.run(argv, os.environ, SCONTROL_TIMEOUT)
    except (processes.CannotRun, processes.TimedOut) as exc:
        raise cdi.CdiError(f"node {node}: {exc}") from None
    if code != 0:
        raise cdi.CdiError(f"node {node}: scontrol show job {job}: {err.strip() or code}")
    return cdi.job_gpus_on_node(out, node)


def node_name(options: Options) -> str:
    return options.node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename


def resolve(options: Options) -> list[str]:
    """The runtime's command line: the same, or with --config naming the edited config (the
    step's GPUs added, resource limits the node cannot raise to lowered: scrun_cdi.rlimits)."""
    node = node_name(options)
    path = os.path.join(options.bundle, "config.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise cdi.CdiError(f"node {node}: {path}: {exc.strerror}") from None
    # Slurm 22.05 (--job) names no GPUs in the config: its job record may have some
    may_have_gpus = bool(options.job) or any(
        f'"{n}='.encode() in text for n in cdi.STEP_GPU_VARIABLES
    )
    if not may_have_gpus and b'"rlimits"' not in text:
        return options.runtime  # nothing to edit: not even the config is parsed
    try:
        config = leanjson.loads(text.decode())
    except ValueError as exc:
        raise cdi.CdiError(f"node {node}: {path}: {exc}") from None
    if not isinstance(config, dict):
        raise cdi.CdiError(f"node {node}: {path}: not a JSON object")
    edited = rlimits.fit_to_node(config)
    if may_have_gpus:
        edited = with_gpus(config, options, node) or edited
    if not edited:
        return options.runtime
    import json  # written as read (leanjson writes only what a state file holds)

    memory = os.memfd_create("config.json", 0)  # inherited by the runtime: no CLOEXEC
    os.write(memory, json.dumps(config).encode())
    at = options.runtime.index("run") + 1
    return [*options.runtime[:at], f"--config=/proc/self/fd/{memory}", *options.runtime[at:]]


def with_gpus(config: dict[str, Any], options: Options, node: str) -> bool:
    """Add the step's GPUs to `config` from the node's CDI spec; False when it has none."""
    process = config.get("process")
    env = (process.get("env") if isinstance(process, dict) else None) or []
    gpus = cdi.step_gpus(env)
    dirs = tuple(options.spec_dirs) or cdi.DEFAULT_SPEC_DIRS
    derived = False
    if gpus is None and options.job:
        # nothing in the config (22.05): ask Slurm, unless the node has no CDI spec dir at all
        if not any(os.path.isdir(d) for d in dirs):
            return False
        gpus, derived = job_gpus(options.job, node), True
    if not gpus:
        return False
    spec = cdi.load_spec(node, options.kind, dirs)
    cdi.apply(config, spec, gpus, node)
    if derived:
        cdi.set_env(config, cdi.environment_for(gpus), replace=False)
    return True


def run(argv: Sequence[str], deferred: set[int]) -> int:
    """The wrapper, its signals waiting since its start (`deferred`: the mask before): the
    runtime's exit code, or 1 when it could not be run (then signals act as before)."""
    options_given = argv[: argv.index("--")] if "--" in argv else argv
    if "--help" in options_given or "-h" in options_given:
        signals.restore(deferred)
        print(f"{USAGE}\n\n{__doc__}", end="")
        return 0
    try:
        options = parse(argv)
        ran = options.command == "run"  # else exec: no bundle, no code to keep
        runtime = resolve(options) if ran else options.runtime
        runtime, errors = with_error_log(runtime, options.command)
        watch = exit_record.OomWatch.start() if ran else None
        code = processes.hand_over(runtime, os.environ)
    except (cdi.CdiError, processes.CannotRun) as exc:
        signals.restore(deferred)
        print_error(PROGRAM, str(exc))
        return 1
    if code in _FAILED[options.command] and errors is not None:
        code = start_failure_code(os.pread(errors, 65536, 0)) or code
    if watch is not None and watch.killed():
        from scrunlib.state import shell_exit_code

        keep_record(options, shell_exit_code(code))
    return end_as(code)


def with_error_log(runtime: list[str], command: str) -> tuple[list[str], int | None]:
    """crun's command line (its `command`: run or exec) with a log of its errors in a
    memory file (inherited: no CLOEXEC; crun closes it in the container), and that file;
    another runtime's, or one given a log of the site's, as it is (None)."""
    if os.path.basename(runtime[0]) != "crun" or any(
        arg == "--log" or arg.startswith("--log=") for arg in runtime[: runtime.index(command)]
    ):
        return runtime, None
    errors = os.memfd_create("crun-errors", 0)
    log = [f"--log=/proc/self/fd/{errors}", "--log-format=json"]
    return [runtime[0], *log, *runtime[1:]], errors


# What podman makes of an OCI runtime's error (libpod: getOCIRuntimeError): the program is
# not there, 127; any other failure to run it, 126.
_NOT_FOUND = ("executable file not found", "no such file or directory")


def start_failure_code(log: bytes) -> int | None:
    """127 or 126 when crun's JSON log (`--log-format=json`: one object an entry, on one
    line or several) holds an error, the first one deciding; None when it holds none."""
    import json

    decoder, rest = json.JSONDecoder(), log.decode(errors="replace").lstrip()
    while rest:
        try:
            entry, end = decoder.raw_decode(rest)
        except ValueError:
            return None
        if isinstance(entry, dict) and entry.get("level") == "error":
            message = str(entry.get("msg", "")).lower()
            return 127 if any(words in message for words in _NOT_FOUND) else 126
        rest = rest[end:].lstrip()
    return None


def keep_record(options: Options, code: int) -> None:
    """Keep `code` for the anchor on this node (scrunlib.exit_record), named after the step
    Slurm's config.json names and this task. Nothing is said when it cannot: the anchor then
    reports what Slurm did."""
    try:
        with open(os.path.join(options.bundle, "config.json"), "rb") as f:
            identity = exit_record.step_identity(f.read())
    except OSError:
        return
    if identity is not None:
        directory = exit_record.RECORD_DIR.format(uid=os.getuid())
        name = exit_record.record_name(*identity, node_name(options), os.getpid())
        exit_record.write(directory, name, code)


def end_as(code: int) -> int:
    """Our exit code, the runtime's; a runtime killed by signal N, we die of N too."""
    if code < 0:
        signals.die_of(-code)
        return 128 - code  # a signal that does not end a process
    return code
