"""scrunlib.cdi and scrun-cdi-run: the step's GPUs found (config env, 22.05's job record) and
the node's CDI spec applied to the config crun gets; every problem one line naming the node
and the file; a step without GPUs handed over untouched."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scrun_cdi import main as cdi_main
from scrun_cdi import rlimits
from scrun_cdi import wrapper as cdi_run
from scrunlib import cdi, exit_record
from waiting import wait_for

DEVICE = "/dev/null"  # a character device every test machine has


def spec_file(directory: Path, name: str = "nvidia.json", **extra: Any) -> Path:
    document = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [{"path": DEVICE}]}},
            {
                "name": "1",
                "containerEdits": {"deviceNodes": [{"path": "/dev/gpu1", "hostPath": DEVICE}]},
            },
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/zero"}],
            "mounts": [{"hostPath": "/lib", "containerPath": "/drv", "options": ["ro", "bind"]}],
            "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"]}],
        },
        **extra,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(document))
    return path


def base_config() -> dict[str, Any]:
    return {"process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]}, "mounts": []}


def test_a_gpu_brings_its_device_and_the_common_edits(tmp_path: Path) -> None:
    spec_file(tmp_path)
    config = base_config()
    cdi.apply(config, cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(tmp_path),)), [0, 1], "n1")
    null, zero = os.stat(DEVICE), os.stat("/dev/zero")
    # device nodes are bind mounts of the node's (the host path, when the spec names one)
    device = ["bind", "nosuid"]
    assert [(m["destination"], m["source"], m["options"]) for m in config["mounts"]] == [
        ("/dev/zero", "/dev/zero", device),
        ("/drv", "/lib", ["ro", "bind"]),
        (DEVICE, DEVICE, device),
        ("/dev/gpu1", DEVICE, device),
    ]
    assert {m["type"] for m in config["mounts"]} == {"bind"}
    assert "devices" not in config["linux"]
    rules = config["linux"]["resources"]["devices"]
    assert [(r["major"], r["minor"]) for r in rules] == [
        (os.major(zero.st_rdev), os.minor(zero.st_rdev)),
        (os.major(null.st_rdev), os.minor(null.st_rdev)),
    ]
    assert all(r["allow"] and r["type"] == "c" and r["access"] == "rwm" for r in rules)
    assert config["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]
    assert config["hooks"] == {"createContainer": [{"path": "/bin/true", "args": ["true"]}]}


def test_a_later_directory_wins_and_other_kinds_are_ignored(tmp_path: Path) -> None:
    spec_file(tmp_path / "etc")
    spec_file(tmp_path / "run", devices=[{"name": "0", "containerEdits": {"env": ["X=run"]}}])
    spec_file(tmp_path / "run", "amd.json", kind="amd.com/gpu", devices=[])
    spec = cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(tmp_path / "etc"), str(tmp_path / "run")))
    config = base_config()
    cdi.apply(config, spec, [0], "n1")
    assert "X=run" in config["process"]["env"]
    assert len(spec.files) == 2


def no_spec(directory: Path) -> None:
    pass


def spec_without_the_device(directory: Path) -> None:
    spec_file(directory)


def malformed_spec(directory: Path) -> None:
    directory.mkdir()
    (directory / "nvidia.json").write_text("{")


@pytest.mark.parametrize(
    ("setup", "gpu", "words"),
    [
        (no_spec, 0, ["node n1:", "no CDI spec of kind nvidia.com/gpu in ", "GPUs 0"]),
        (spec_without_the_device, 7, ["node n1:", "nvidia.json", "no device", "=7"]),
        (malformed_spec, 0, ["node n1:", "nvidia.json", "not a CDI spec"]),
    ],
    ids=["missing", "no-device", "malformed"],
)
def test_problems_name_the_node_and_the_file(
    tmp_path: Path, setup: Callable[[Path], None], gpu: int, words: list[str]
) -> None:
    directory = tmp_path / "cdi"
    setup(directory)
    with pytest.raises(cdi.CdiError) as raised:
        spec = cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(directory),))
        cdi.apply(base_config(), spec, [gpu], "n1")
    message = str(raised.value)
    assert "\n" not in message
    assert all(word in message for word in words), message


def test_an_unreadable_spec_is_named(tmp_path: Path) -> None:
    path = spec_file(tmp_path)
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("root reads any file")
    with pytest.raises(cdi.CdiError, match=f"node n1: {path}: Permission denied"):
        cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(tmp_path),))


def test_an_edit_it_cannot_apply_is_refused(tmp_path: Path) -> None:
    spec_file(tmp_path, containerEdits={"netDevices": [{"hostInterfaceName": "ib0"}]})
    with pytest.raises(cdi.CdiError, match="containerEdits netDevices not supported"):
        cdi.apply(base_config(), cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(tmp_path),)), [0], "n1")


@pytest.mark.parametrize(
    ("text", "expected"), [("0", [0]), ("0,1", [0, 1]), ("1-3,0", [1, 2, 3, 0]), ("2,2", [2])]
)
def test_index_lists(text: str, expected: list[int]) -> None:
    assert cdi.parse_indexes(text) == expected


def test_step_gpus_from_the_config_environment() -> None:
    assert cdi.step_gpus(["A=1"]) is None
    assert cdi.step_gpus(["SLURM_STEP_GPUS=1,0", "SLURM_JOB_GPUS=0,1,2"]) == [1, 0]
    assert cdi.step_gpus(["SLURM_JOB_GPUS=3"]) == [3]


JOB_RECORD = """JobId=5 JobName=scrun
   NumNodes=3 NumCPUs=3
     Nodes=n[1-2] CPU_IDs=0 Mem=512 GRES=gpu:1(IDX:1)
     Nodes=n10 CPU_IDs=0-1 Mem=512 GRES=gpu:a100:2(IDX:0-1),mps:100(0/100,0/100)
"""


@pytest.mark.parametrize(("node", "expected"), [("n2", [1]), ("n10", [0, 1]), ("n3", [])])
def test_the_nodes_gpus_from_the_job_record(node: str, expected: list[int]) -> None:
    assert cdi.job_gpus_on_node(JOB_RECORD, node) == expected


def test_the_environment_slurm_gives_a_constrained_task() -> None:
    assert cdi.environment_for([1, 3]) == {
        "SLURM_STEP_GPUS": "1,3",
        "SLURM_GPUS_ON_NODE": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GPU_DEVICE_ORDINAL": "0,1",
    }


# ----------------------------------------------------------------------------- the wrapper


def bundle(tmp_path: Path, env: list[str]) -> Path:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"process": {"env": env}}))
    return directory


RUNTIME = ["crun", "--root=/r", "run", "--bundle", "B", "name"]


def test_a_step_without_gpus_gets_the_runtime_unchanged(tmp_path: Path) -> None:
    options = cdi_run.parse(["--bundle", str(bundle(tmp_path, ["A=1"])), "--", *RUNTIME])
    assert cdi_run.resolve(options) == RUNTIME


def test_a_step_with_gpus_gets_its_config_from_memory(tmp_path: Path) -> None:
    spec_file(tmp_path / "cdi")
    directory = bundle(tmp_path, ["SLURM_STEP_GPUS=0", "CUDA_VISIBLE_DEVICES=0"])
    argv = ["--bundle", str(directory), "--cdi-dir", str(tmp_path / "cdi"), "--", *RUNTIME]
    runtime = cdi_run.resolve(cdi_run.parse(argv))
    assert runtime[:3] == ["crun", "--root=/r", "run"]
    assert runtime[4:] == RUNTIME[3:]
    config_path = runtime[3].removeprefix("--config=")
    assert config_path.startswith("/proc/self/fd/")
    fd = int(config_path.rsplit("/", 1)[1])
    try:
        assert stat.S_ISREG(os.fstat(fd).st_mode)
        config = json.loads(os.pread(fd, 1 << 20, 0))
    finally:
        os.close(fd)
    assert DEVICE in [m["destination"] for m in config["mounts"]]
    assert json.loads((directory / "config.json").read_text()) == {
        "process": {"env": ["SLURM_STEP_GPUS=0", "CUDA_VISIBLE_DEVICES=0"]}
    }


def test_usage_problems_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cdi_main.main(["--bundle", "B", "--", "crun", "state", "x"]) == 1
    assert cdi_main.main(["--frob"]) == 1
    assert cdi_main.main(["--", "crun", "run", "x"]) == 1  # run needs the bundle
    assert cdi_main.main(["--bundle", "B", "--", "crun", "exec", "x", "true"]) == 1  # exec none
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4
    assert all(line.startswith("scrun-cdi-run: error: ") for line in lines)


@pytest.mark.parametrize(
    ("runtime", "command"),
    [
        (["crun", "--root=/r", "exec", "name", "sh", "-c", "run"], "exec"),
        (["crun", "--root=/r", "run", "--bundle", "B", "name"], "run"),
    ],
)
def test_the_runtimes_command_is_its_first_run_or_exec(runtime: list[str], command: str) -> None:
    """A later one is a word of the process's command line."""
    argv = ["--", *runtime] if command == "exec" else ["--bundle", "B", "--", *runtime]
    assert cdi_run.parse(argv).command == command


def test_help_is_the_usage_and_what_the_wrapper_does(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` before the runtime's `--` helps (it was "unknown option '--help'", exit 1);
    after it, it is the runtime's."""
    assert cdi_main.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: scrun-cdi-run --bundle DIR") and "RunTimeRun=" in out
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # deferred no more
    assert cdi_main.main(["--bundle", "B", "--", "crun", "--help"]) == 1


def test_a_yaml_spec_is_read_with_pyyaml(tmp_path: Path) -> None:
    """nvidia-ctk's default output; PyYAML is a dependency of the scrun distribution."""
    (tmp_path / "nvidia.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        "- name: '0'\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n"
        "containerEdits:\n  env:\n  - FROM_YAML=1\n"
    )
    config = base_config()
    cdi.apply(config, cdi.load_spec("n1", cdi.DEFAULT_KIND, (str(tmp_path),)), [0], "n1")
    assert "FROM_YAML=1" in config["process"]["env"]
    assert [m["destination"] for m in config["mounts"]] == [DEVICE]


# ----------------------------------------------------------------------------- the runtime's end


REPO = Path(__file__).resolve().parents[2]
# scrun-cdi-run from this tree, as the harness runs it on the nodes
SCRUN_CDI_RUN = [
    sys.executable,
    "-I",
    "-c",
    f"import sys; sys.path[:0] = [{str(REPO / 'shared')!r}, {str(REPO / 'tools/scrun-cdi')!r}]; "
    "from scrun_cdi.main import main; sys.exit(main())",
]


def runtime_script(tmp_path: Path, body: str) -> list[str]:
    """A runtime as oci.conf runs one (`... run ...`): a shell script doing `body`."""
    script = tmp_path / "runtime"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return [str(script), "run", "--bundle", "B", "name"]


@pytest.mark.parametrize(("body", "code"), [("exit 0", 0), ("exit 3", 3), ("exit 137", 137)])
def test_the_wrapper_exits_as_the_runtime_did(tmp_path: Path, body: str, code: int) -> None:
    argv = ["--bundle", str(bundle(tmp_path, [])), "--", *runtime_script(tmp_path, body)]
    assert cdi_run.run(argv, set()) == code


def fake_crun(tmp_path: Path, logged: str, code: int, command: str = "run") -> list[str]:
    """A `crun` that writes `logged` to the log it is given (--log=PATH) and exits `code`;
    its `command` line (run, or exec)."""
    script = tmp_path / "crun"
    script.write_text(
        "#!/bin/sh\nfor a; do case $a in --log=*) log=${a#--log=};; esac; done\n"
        f"[ -z \"$log\" ] || printf '%s' '{logged}' >>\"$log\"\nexit {code}\n"
    )
    script.chmod(0o755)
    if command == "exec":
        return [str(script), "--root=/run/x", "exec", "name", "prog"]
    return [str(script), "--root=/run/x", "run", "--bundle", "B", "name"]


NOT_FOUND = (
    '{"msg":"executable file `nope` not found in $PATH: No such file or directory",'
    '"level":"error","time":"2026-12-02T19:54:55Z"}\n'
)
# crun 1.28 writes each entry on several lines
DENIED = '{\n  "msg": "open executable: Permission denied",\n  "level": "error"\n}\n'
WARNED = '{"msg":"cannot set the OOM score","level":"warning"}\n'


@pytest.mark.parametrize(
    ("logged", "code", "expected"),
    [
        (NOT_FOUND, 1, 127),  # podman run IMAGE nope
        (DENIED, 1, 126),  # podman run IMAGE /etc/passwd
        (WARNED + DENIED, 1, 126),
        (WARNED, 1, 1),  # the container's own exit 1
        ("", 1, 1),
        (NOT_FOUND, 3, 3),  # the container ran: its code, whatever crun said
        ("not json", 1, 1),
    ],
)
def test_crun_failing_to_start_the_process_exits_as_podman_reports_it(
    tmp_path: Path, logged: str, code: int, expected: int
) -> None:
    argv = ["--bundle", str(bundle(tmp_path, [])), "--", *fake_crun(tmp_path, logged, code)]
    assert cdi_run.run(argv, set()) == expected


@pytest.mark.parametrize(
    ("logged", "code", "expected"),
    [
        (NOT_FOUND, 255, 127),  # podman exec C nope, crun 1.8.1 and 1.21
        (NOT_FOUND, 1, 127),  # crun 1.28
        (DENIED, 255, 126),  # podman exec C /etc/passwd
        (DENIED, 1, 126),
        ("", 255, 255),  # the process's own exit 255
        (WARNED, 1, 1),
        (NOT_FOUND, 3, 3),
    ],
)
def test_crun_exec_failing_to_start_the_process_exits_as_podman_reports_it(
    tmp_path: Path, logged: str, code: int, expected: int
) -> None:
    """An exec needs no bundle."""
    assert cdi_run.run(["--", *fake_crun(tmp_path, logged, code, "exec")], set()) == expected


def test_an_exec_keeps_no_code_on_the_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The anchor reads a container step's record; an exec's srun tells scrun its code."""
    monkeypatch.setattr(exit_record, "RECORD_DIR", str(tmp_path / "records-{uid}"))
    monkeypatch.setattr(exit_record.OomWatch, "start", classmethod(lambda cls: Killed(True)))
    assert cdi_run.run(["--", *fake_crun(tmp_path, "", 0, "exec")], set()) == 0
    assert not (tmp_path / f"records-{os.getuid()}").exists()


def test_only_crun_without_a_log_of_the_sites_gets_one() -> None:
    crun = ["/usr/bin/crun", "--root=/r", "run", "--bundle", "B", "n"]
    runtime, errors = cdi_run.with_error_log(crun, "run")
    assert errors is not None
    os.close(errors)
    assert runtime == [crun[0], f"--log=/proc/self/fd/{errors}", "--log-format=json", *crun[1:]]
    for given in (["runc", "run", "n"], ["crun", "--log=/var/log/crun", "run", "n"]):
        assert cdi_run.with_error_log(given, "run") == (given, None)
    # a --log of the process's own command line is no log of crun's
    crun = ["crun", "--root=/r", "exec", "n", "prog", "--log=x"]
    runtime, errors = cdi_run.with_error_log(crun, "exec")
    assert errors is not None
    os.close(errors)
    assert runtime[1:3] == [f"--log=/proc/self/fd/{errors}", "--log-format=json"]


def test_a_runtime_killed_by_a_signal_kills_the_wrapper_alike(tmp_path: Path) -> None:
    argv = ["--bundle", str(bundle(tmp_path, [])), "--", *runtime_script(tmp_path, "kill -9 $$")]
    done = subprocess.run(
        [*SCRUN_CDI_RUN, *argv],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


IDENTITY = ["SLURM_JOB_ID=42", "SLURM_STEP_ID=0"]


class Killed:
    """An OomWatch that saw a kill (or not)."""

    def __init__(self, killed: bool) -> None:
        self.seen = killed

    def killed(self) -> bool:
        return self.seen


@pytest.mark.parametrize(("killed", "kept"), [(True, "0\n"), (False, None)])
def test_the_code_is_kept_on_the_node_only_when_the_oom_killer_struck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed: bool, kept: str | None
) -> None:
    """A child killed, the main process's 0: the anchor will find it, named after the task."""
    monkeypatch.setattr(exit_record, "RECORD_DIR", str(tmp_path / "records-{uid}"))
    monkeypatch.setattr(exit_record.OomWatch, "start", classmethod(lambda cls: Killed(killed)))
    directory = bundle(tmp_path, IDENTITY)
    argv = ["--bundle", str(directory), "--node", "n1", "--", *runtime_script(tmp_path, "exit 0")]
    assert cdi_run.run(argv, set()) == 0
    records = tmp_path / f"records-{os.getuid()}"
    kept_now = {p.name: p.read_text() for p in records.iterdir()} if records.exists() else {}
    assert kept_now == ({f"42.0.n1.{os.getpid()}": kept} if kept else {})


def test_a_signal_while_the_wrapper_prepares_reaches_the_runtime(tmp_path: Path) -> None:
    """`podman stop` while the step starts: slurmstepd's SIGTERM comes while scrun-cdi-run
    still reads the config (a FIFO here, that it blocks on). It does not end the wrapper: it
    waits, and the runtime gets it, pending, to pass on once the container runs (crun)."""
    directory = tmp_path / "bundle"
    directory.mkdir()
    config = directory / "config.json"
    os.mkfifo(config)
    show_pending = (  # (it waits for the signal, 10 s at most: it may come after its start)
        "import signal, sys, time\n"
        "for _ in range(1000):\n    if signal.sigpending(): break\n    time.sleep(0.01)\n"
        "print(*sorted(signal.sigpending())); sys.exit(7)"
    )
    argv = ["--bundle", str(directory), "--", sys.executable, "-c", show_pending, "run"]
    wrapper = subprocess.Popen(
        [*SCRUN_CDI_RUN, *argv],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for("scrun-cdi-run to hold its signals", lambda: blocked(wrapper.pid, signal.SIGTERM))
        wrapper.send_signal(signal.SIGTERM)
        config.write_text(json.dumps({"process": {"env": []}}))  # it may go on now
        out, _ = wrapper.communicate(timeout=60)
    finally:
        wrapper.kill()
        wrapper.wait()
    assert (wrapper.returncode, out.strip()) == (7, str(int(signal.SIGTERM)))


@pytest.mark.parametrize("command", ["run", "exec"])
def test_a_signal_to_the_running_wrapper_reaches_the_runtime(tmp_path: Path, command: str) -> None:
    """`podman kill -s USR1`: Slurm signals the step's task (slurmstepd's child, this
    wrapper), not the runtime below it; the wrapper hands it on. So for an exec's (srun
    passes a signal to its step's tasks)."""
    show_pending = (  # ready, then it waits for a signal (10 s at most) and names it
        "import signal, sys, time\n"
        "print('ready', flush=True)\n"
        "for _ in range(1000):\n    if signal.sigpending(): break\n    time.sleep(0.01)\n"
        "print(*sorted(signal.sigpending())); sys.exit(5)"
    )
    argv = ["--", sys.executable, "-c", show_pending, command]
    if command == "run":
        argv[:0] = ["--bundle", str(bundle(tmp_path, []))]
    wrapper = subprocess.Popen([*SCRUN_CDI_RUN, *argv], stdout=subprocess.PIPE, text=True)
    try:
        assert wrapper.stdout is not None
        assert wrapper.stdout.readline() == "ready\n"
        wrapper.send_signal(signal.SIGUSR1)
        out, _ = wrapper.communicate(timeout=60)
    finally:
        wrapper.kill()
        wrapper.wait()
    assert (wrapper.returncode, out.strip()) == (5, str(int(signal.SIGUSR1)))


def blocked(pid: int, signum: int) -> bool:
    """Whether process `pid` blocks `signum` (its /proc status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    return bool(int(mask, 16) & 1 << (signum - 1))


# ------------------------------------------------------------- resource limits on the node


class FakeLimits:
    """This process's limits as a node gives them: (soft, hard) by resource, and whether
    it may raise a hard one (root in the host's user namespace may)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, may_raise: bool, **limits: int) -> None:
        self.limits = {getattr(resource, name): (value, value) for name, value in limits.items()}
        self.set: list[tuple[int, tuple[int, int]]] = []
        self.may_raise = may_raise
        monkeypatch.setattr(resource, "getrlimit", lambda kind: self.limits[kind])
        monkeypatch.setattr(resource, "setrlimit", self.setrlimit)

    def setrlimit(self, kind: int, value: tuple[int, int]) -> None:
        wanted, own = value[1], self.limits[kind][1]
        finite = own != resource.RLIM_INFINITY
        if not self.may_raise and finite and (wanted == resource.RLIM_INFINITY or wanted > own):
            raise ValueError("not allowed to raise maximum limit")
        self.set.append((kind, value))


def limits_config(*limits: tuple[str, int, int]) -> dict[str, Any]:
    return {"process": {"rlimits": [{"type": t, "soft": s, "hard": h} for t, s, h in limits]}}


def test_a_limit_above_what_the_node_can_raise_to_is_lowered_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """podman as root with any --ulimit asks for 1048576 processes: a node whose runtime
    cannot raise its limit gives its own hard limit (crun would refuse the container)."""
    FakeLimits(monkeypatch, may_raise=False, RLIMIT_NPROC=96367, RLIMIT_NOFILE=4096)
    config = limits_config(("RLIMIT_NOFILE", 1024, 1024), ("RLIMIT_NPROC", 1048576, 1048576))
    assert rlimits.fit_to_node(config)
    assert config == limits_config(("RLIMIT_NOFILE", 1024, 1024), ("RLIMIT_NPROC", 96367, 96367))


def test_a_soft_limit_under_the_nodes_hard_one_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeLimits(monkeypatch, may_raise=False, RLIMIT_NOFILE=4096)
    config = limits_config(("RLIMIT_NOFILE", 2048, rlimits.UNLIMITED))
    assert rlimits.fit_to_node(config)
    assert config == limits_config(("RLIMIT_NOFILE", 2048, 4096))


def test_a_node_that_may_raise_a_limit_raises_its_own_and_keeps_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeLimits(monkeypatch, may_raise=True, RLIMIT_NPROC=96367)
    config = limits_config(("RLIMIT_NPROC", 1048576, 1048576))
    assert not rlimits.fit_to_node(config)
    assert config == limits_config(("RLIMIT_NPROC", 1048576, 1048576))
    assert fake.set == [(resource.RLIMIT_NPROC, (96367, 1048576))]


def test_limits_the_node_gives_and_malformed_ones_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeLimits(monkeypatch, may_raise=False, RLIMIT_NOFILE=4096, RLIMIT_CORE=0)
    fake.limits[resource.RLIMIT_CORE] = (0, resource.RLIM_INFINITY)
    config = limits_config(
        ("RLIMIT_NOFILE", 4096, 4096),
        ("RLIMIT_CORE", rlimits.UNLIMITED, rlimits.UNLIMITED),
        ("RLIMIT_BOGUS", 1, 2**40),
        ("getrlimit", 1, 2**40),
    )
    config["process"]["rlimits"] += [{"type": "RLIMIT_NOFILE", "soft": True, "hard": 2**40}, 7]
    before = json.loads(json.dumps(config))
    assert not rlimits.fit_to_node(config)
    assert config == before and fake.set == []
    assert not rlimits.fit_to_node({"process": None}) and not rlimits.fit_to_node({})


def test_a_step_whose_limits_the_node_cannot_give_gets_its_config_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeLimits(monkeypatch, may_raise=False, RLIMIT_NPROC=96367)
    directory = tmp_path / "bundle"
    directory.mkdir()
    written = {**limits_config(("RLIMIT_NPROC", 1048576, 1048576)), "root": {"path": "r"}}
    (directory / "config.json").write_text(json.dumps(written))
    runtime = cdi_run.resolve(cdi_run.parse(["--bundle", str(directory), "--", *RUNTIME]))
    assert runtime[:3] + runtime[4:] == RUNTIME
    fd = int(runtime[3].removeprefix("--config=/proc/self/fd/"))
    try:
        config = json.loads(os.pread(fd, 1 << 20, 0))
    finally:
        os.close(fd)
    assert config == {**limits_config(("RLIMIT_NPROC", 96367, 96367)), "root": {"path": "r"}}
    assert json.loads((directory / "config.json").read_text()) == written


def test_a_config_that_is_not_json_is_one_error_naming_it(tmp_path: Path) -> None:
    directory = tmp_path / "bundle"
    directory.mkdir()
    (directory / "config.json").write_text('{"process": {"rlimits": [')
    with pytest.raises(cdi.CdiError, match=r"^node \S+: .*/bundle/config.json: "):
        cdi_run.resolve(cdi_run.parse(["--bundle", str(directory), "--", *RUNTIME]))
