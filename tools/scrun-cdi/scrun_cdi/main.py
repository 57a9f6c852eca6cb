"""scrun-cdi-run: oci.conf's RunTimeRun on a compute node. It gives the container step the GPUs
Slurm allocated to it, from the node's own CDI spec, then hands over to the runtime (crun):

    RunTimeRun="exec scrun-cdi-run --bundle %b -- crun ... run --bundle %b %n.%u.%j.%s.%t"
    (Slurm 22.05: scrun-cdi-run --bundle %b --job %j --node %n -- ...; see scrunlib.cdi)

The config crun gets is written to a memory file (/proc/self/fd/N, crun's --config), so
nothing is written to the node and Slurm's per-step copy of the config.json is left as it is.
A step without GPUs is handed over unchanged, before any spec is read. An error is one line
on the step's stderr (`scrun-cdi-run: error: node n1: /etc/cdi/nvidia.json: ...`), exit 1,
and no container is started.

The nodes need only Python's standard library (PyYAML for YAML specs); not a hot path of
scrun's, but every container step of the node passes through it: argparse is not imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from scrunlib import cdi, processes
from scrunlib.errors import print_error

PROGRAM = "scrun-cdi-run"
SCONTROL_TIMEOUT = 30.0
USAGE = (
    f"usage: {PROGRAM} --bundle DIR [--kind KIND] [--cdi-dir DIR]... "
    "[--job JOBID --node NODE] -- RUNTIME [OPTION]... run [OPTION]... NAME"
)


class Options:
    def __init__(self) -> None:
        self.bundle = ""
        self.kind = cdi.DEFAULT_KIND
        self.spec_dirs: list[str] = []
        self.job = ""
        self.node = ""
        self.runtime: list[str] = []


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
            raise cdi.CdiError(f"unknown option {arg!r}; {USAGE}")
        if not has_value:
            if not args:
                raise cdi.CdiError(f"{name} needs a value; {USAGE}")
            value = args.pop(0)
        if name == "--cdi-dir":
            options.spec_dirs.append(value)
        else:
            setattr(options, name[2:], value)  # bundle, kind, job, node
    if not options.bundle or "run" not in options.runtime:
        raise cdi.CdiError(USAGE)
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


def resolve(options: Options) -> list[str]:
    """The runtime's command line: the same, or with --config naming the edited config."""
    node = options.node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    path = os.path.join(options.bundle, "config.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise cdi.CdiError(f"node {node}: {path}: {exc.strerror}") from None
    if not options.job and not any(f'"{n}='.encode() in text for n in cdi.STEP_GPU_VARIABLES):
        return options.runtime  # no GPUs in the step's environment: not even json is needed
    import json

    try:
        config = json.loads(text)
    except ValueError as exc:
        raise cdi.CdiError(f"node {node}: {path}: {exc}") from None
    env = (config.get("process") or {}).get("env") or []
    gpus = cdi.step_gpus(env)
    dirs = tuple(options.spec_dirs) or cdi.DEFAULT_SPEC_DIRS
    derived = False
    if gpus is None and options.job:
        # nothing in the config (22.05): ask Slurm, unless the node has no CDI spec dir at all
        if not any(os.path.isdir(d) for d in dirs):
            return options.runtime
        gpus, derived = job_gpus(options.job, node), True
    if not gpus:
        return options.runtime
    spec = cdi.load_spec(node, options.kind, dirs)
    cdi.apply(config, spec, gpus, node)
    if derived:
        cdi.set_env(config, cdi.environment_for(gpus), replace=False)
    memory = os.memfd_create("config.json", 0)  # inherited by the runtime: no CLOEXEC
    os.write(memory, json.dumps(config).encode())
    at = options.runtime.index("run") + 1
    return [*options.runtime[:at], f"--config=/proc/self/fd/{memory}", *options.runtime[at:]]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse(sys.argv[1:] if argv is None else argv)
        runtime = resolve(options)
        processes.replace(runtime, os.environ)
    except cdi.CdiError as exc:
        print_error(PROGRAM, str(exc))
    except processes.CannotRun as exc:
        print_error(PROGRAM, str(exc))
    return 1


if __name__ == "__main__":
    sys.exit(main())
