"""podman with `--runtime scrun`, end to end: every container is a real Slurm job on the
local cluster. Each test checks that nothing is left behind (`no_leftovers`)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import READ_ONLY_PROBE, READ_ONLY_SEEN, SCRUN_PODMAN, salloc_of, wait_for

if TYPE_CHECKING:
    from conftest import Cluster, Podman

IMAGE = "localhost/busybox"
KILL_WITHIN = 3.0  # seconds from SIGKILL to the container's end


def job_ids_in_squeue(cluster: Cluster) -> set[str]:
    done = cluster.run(["squeue", "-h", "-o", "%i"], timeout=30)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def job_with_a_step(cluster: Cluster, cid: str) -> str:
    """The id of container `cid`'s job (its `scrun:<id>` tag), once its step is there."""
    jobs = cluster.run(["squeue", "-h", "-o", "%i %k"]).stdout.splitlines()
    job_id = next(line.split()[0] for line in jobs if line.endswith(f" scrun:{cid}"))
    wait_for(
        "the container's step",
        lambda: cluster.run(["scontrol", "show", "step", f"{job_id}.0"]).returncode == 0,
    )
    return job_id


@pytest.fixture
def container_name(podman: Podman) -> Iterator[str]:
    """A unique name; the container is force-removed afterwards if a test left it."""
    name = f"scrun-test-{uuid.uuid4().hex[:10]}"
    yield name
    if podman("container", "exists", name).returncode == 0:
        podman.scrun("rm", "-f", "-t", "0", name)


# ----------------------------------------------------------------------------- output


def test_echo_hello(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "--rm", IMAGE, "echo", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"


def test_container_runs_inside_a_slurm_job(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    done = podman.scrun("run", "--rm", IMAGE, "sh", "-c", "echo $SLURM_JOB_ID")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"[0-9]+\n", done.stdout), repr(done.stdout)


def slurm_version(cluster: Cluster) -> tuple[int, int]:
    """(major, minor) of the cluster's Slurm, from `srun --version` (`slurm 24.11.5`)."""
    major, minor = cluster.run(["srun", "--version"]).stdout.split()[-1].split(".")[:2]
    return int(major), int(minor)


def test_job_and_step_carry_the_container_id(
    cluster: Cluster, podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """The container's id tags its job and step: in the comment `scrun:<id>` on every
    version, and on Slurm >= 23.02 (which has `--container-id`) also as the job's and the
    step's ContainerID, shown by scontrol and squeue. 22.05 has no such field."""
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "60")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    job_id = job_with_a_step(cluster, cid)
    job = cluster.run(["scontrol", "show", "job", job_id]).stdout
    step = cluster.run(["scontrol", "show", "step", f"{job_id}.0"]).stdout
    if slurm_version(cluster) >= (23, 2):
        assert f"ContainerID={cid}" in job, job
        assert f"ContainerID={cid}" in step, step
        listed = cluster.run(["squeue", "-h", "-j", job_id, "-O", "ContainerId:80"]).stdout
        assert listed.strip() == cid, listed
    else:
        assert "ContainerID" not in job, job
    assert podman.scrun("rm", "-f", "-t", "0", container_name).returncode == 0


def test_the_engines_memory_and_cpus_size_the_job(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """`--memory` and `--cpus`, which the node's runtime under Slurm's cgroups would drop,
    are what the job asks for: Slurm holds the container to them."""
    script = "echo $SLURM_JOB_ID; nproc"
    done = podman.scrun(
        "run", "--rm", "--memory", "96m", "--cpus", "1.5", IMAGE, "sh", "-c", script
    )
    assert done.returncode == 0, done.stderr
    job_id, cpus = done.stdout.split()
    job = cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout
    assert "MinMemoryNode=96M" in job.split() and "CPUs/Task=2" in job.split(), job
    assert cpus == "2"  # task/affinity binds the step to the job's CPUs


# ----------------------------------------------------------------------------- exit codes


def test_exit_code_is_the_containers(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "--rm", IMAGE, "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr


def test_a_resource_limit_above_the_nodes_is_lowered_to_it(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """podman writes the limits asked on the login host; a node's runtime that may not raise
    its hard limit to one (the test nodes: a user namespace) would refuse the container.
    scrun-cdi-run gives it the node's hard limit instead, or raises its own where it may."""
    done = podman.scrun(
        "run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4194304:4194304",
        IMAGE, "sh", "-c", "ulimit -n; ulimit -Hu",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    nofile, nproc = done.stdout.split()
    assert nofile == "1024" and 0 < int(nproc) <= 4194304


@pytest.mark.parametrize(
    ("program", "code", "said"),
    [
        ("no-such-program", 127, "executable file `no-such-program` not found"),
        # crun 1.8: "open executable: Permission denied"; 1.21: "the path `/etc/passwd`
        # exists but it is not executable: Operation not permitted"
        ("/etc/passwd", 126, "executable"),
    ],
)
def test_a_program_that_cannot_run_exits_as_through_crun(
    podman: Podman, no_leftovers: Callable[..., None], program: str, code: int, said: str
) -> None:
    """crun on the node exits 1 when it cannot start the process; podman reports 127 for a
    program that is not there and 126 for one it cannot run (scrun-cdi-run tells them)."""
    done = podman.scrun("run", "--rm", IMAGE, program)
    assert done.returncode == code, done.stderr
    assert said in done.stderr, done.stderr


def test_a_read_only_container_cannot_write_its_image(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """`--read-only` as through crun: the image's directories cannot be written (they were:
    the image cache's overlays were mounted read-write on the read-only root)."""
    done = podman.scrun("run", "--rm", "--read-only", IMAGE, "sh", "-c", READ_ONLY_PROBE)
    assert (done.returncode, done.stdout) == (0, READ_ONLY_SEEN), done.stderr


def test_container_type_in_the_callers_environment_leaves_the_step_a_container(
    cluster: Cluster, podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """Slurm 26.05's salloc and srun take --container-type (SALLOC_/SRUN_/SLURM_CONTAINER_TYPE
    from their environment), and podman 5 passes its caller's environment to the runtime.
    Whatever such a variable says, the command runs in the container: the image's /usr/bin
    is a link to ../bin, a node's is a directory."""
    env = {
        **cluster.env,
        **{f"{prefix}_CONTAINER_TYPE": "none" for prefix in ("SALLOC", "SRUN", "SLURM")},
    }
    done = podman.scrun("run", "--rm", IMAGE, "readlink", "/usr/bin", env=env)
    assert (done.returncode, done.stdout) == (0, "../bin\n"), done.stderr


RUNTIME_COMMANDS = frozenset({"create", "start", "state", "kill", "delete"})


def podman_version(podman: Podman) -> tuple[int, int]:
    done = podman("version", "--format", "{{.Client.Version}}")
    assert done.returncode == 0, done.stderr
    major, minor = done.stdout.strip().split(".")[:2]
    return int(major), int(minor)


def test_exit_code_comes_from_the_pid_file_process_on_podman_5_3(
    podman: Podman, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    """podman >= 5.3 never calls the runtime's `state`: conmon watches the process named in
    --pid-file (scrun's anchor) and takes its exit status as the container's. The anchor
    exits with the container's code, so the code is right either way; older podman asks
    `state` for it."""
    calls = tmp_path / "calls"
    # named scrun: podman's runtime_supports_json goes by the runtime's name
    wrapper = tmp_path / "scrun"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >>{calls}\nexec {sys.prefix}/bin/scrun "$@"\n')
    wrapper.chmod(0o755)
    done = podman("--runtime", str(wrapper), "run", "--rm", IMAGE, "sh", "-c", "exit 3")
    assert done.returncode == 3, done.stderr
    commands = [
        next((word for word in line.split() if word in RUNTIME_COMMANDS), line)
        for line in calls.read_text().splitlines()
    ]
    assert {"create", "start", "delete"} <= set(commands), commands
    if podman_version(podman) >= (5, 3):
        assert "state" not in commands, commands


def test_killed_by_sigkill_gives_137(
    podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    began = time.monotonic()
    killed = podman.scrun("kill", "-s", "KILL", container_name)
    assert killed.returncode == 0, killed.stderr
    waited = podman.scrun("wait", container_name, timeout=60)
    took = time.monotonic() - began
    assert (waited.returncode, waited.stdout.strip()) == (0, "137"), waited.stderr
    removed = podman.scrun("rm", container_name)
    assert removed.returncode == 0, removed.stderr
    # SIGKILL is immediate (crun: a few ms). podman stop gives up ~5 s after its SIGKILL,
    # so the container must be gone well before that, whatever the site's KillWait.
    assert took < KILL_WITHIN, f"SIGKILL took {took:.1f}s to end the container"


def test_a_container_whose_salloc_is_killed_leaves_no_job(
    podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """salloc killed (the OOM killer, an admin) cannot end the job: Slurm keeps it and its
    step running. The container goes on; its removal ends the job (no_leftovers)."""
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    anchor = podman.scrun("inspect", "--format", "{{.State.Pid}}", container_name)
    os.kill(salloc_of(anchor.stdout.strip()), signal.SIGKILL)
    status = podman.scrun("inspect", "--format", "{{.State.Status}}", container_name)
    assert status.stdout.strip() == "running", status
    removed = podman.scrun("rm", "-f", "-t", "0", container_name, timeout=120)
    assert removed.returncode == 0, removed.stderr


def test_stop_after_slurm_cancelled_the_job_succeeds(
    cluster: Cluster, podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """A job cancelled from outside (scancel, a time limit) stays COMPLETING while Slurm
    ends its step (KillWait), and Slurm refuses signals to it meanwhile: `podman stop`
    succeeds all the same, once Slurm has ended the container."""
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    job_id = job_with_a_step(cluster, cid)
    assert cluster.run(["scancel", job_id]).returncode == 0
    stopped = podman.scrun("stop", "-t", "30", container_name, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "scrun:" not in stopped.stderr, stopped.stderr
    removed = podman.scrun("rm", container_name)
    assert removed.returncode == 0, removed.stderr


@pytest.mark.parametrize("end", ["kill", "rm"])
def test_a_sigkill_after_slurm_cancelled_the_job_ends_the_container_in_time(
    cluster: Cluster, podman: Podman, container_name: str, end: str, tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:  # fmt: skip
    """Slurm refuses a SIGKILL to a step of a job cancelled from outside, and leaves its
    tasks (which ignore SIGTERM here) until KillWait ends them, while podman waits 5 s for
    a killed container's end. The SIGKILL is final all the same: `podman kill -s KILL` or
    `podman rm -f` succeeds, the container exits 137, and what it wrote to its bind mount
    comes back (stage-out waits for the tasks' end, in the `scrun delete` that follows).
    Before, both timed out and left the container `Stopping`."""
    out = tmp_path / "out"
    out.mkdir()
    program = "trap '' TERM; echo before > /out/f; echo running; exec sleep 300"
    started = podman.scrun(
        "run", "-d", "--name", container_name, "-v", f"{out}:/out", IMAGE, "sh", "-c", program
    )
    assert started.returncode == 0, started.stderr
    job_id = job_with_a_step(cluster, started.stdout.strip())
    wait_for(
        "the container running", lambda: "running" in podman.scrun("logs", container_name).stdout
    )
    assert cluster.run(["scancel", job_id]).returncode == 0
    if end == "kill":
        killed = podman.scrun("kill", "-s", "KILL", container_name)
        assert killed.returncode == 0, killed.stderr
        assert podman.scrun("wait", container_name).stdout.strip() == "137"
        assert podman.scrun("rm", container_name).returncode == 0
    else:
        removed = podman.scrun("rm", "-f", "-t", "0", container_name)
        assert removed.returncode == 0, removed.stderr
    assert (out / "f").read_text() == "before\n"


def test_stop_of_a_container_whose_job_slurm_suspended_succeeds(
    cluster: Cluster, podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """The scheduler suspends a job (preemption, `scontrol suspend`): Slurm keeps a
    SIGTERM from its step. `podman stop` succeeds all the same: the SIGTERM's `kill` is no
    error (the container's stderr says it was not delivered), and the SIGKILL after the
    stop timeout, which Slurm delivers, ends it with 137. Before, the failed `kill` made
    podman give up waiting, and the container stayed."""
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    job_id = job_with_a_step(cluster, started.stdout.strip())
    assert cluster.run(["scontrol", "suspend", job_id]).returncode == 0
    stopped = podman.scrun("stop", "-t", "1", container_name)
    assert stopped.returncode == 0, stopped.stderr
    assert podman.scrun("wait", container_name).stdout.strip() == "137"
    said = podman.scrun("logs", container_name).stderr
    assert f"Slurm says its step {job_id}.0 is not running (a suspended job)" in said, said
    assert podman.scrun("rm", container_name).returncode == 0


def test_run_timeout_ends_the_container_as_through_crun(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """`podman run --timeout N`: conmon SIGKILLs the process group of the pid in --pid-file
    (the anchor's, a group of its own as crun's container's is) and reports no exit status;
    podman's cleanup then deletes the container. Through crun and through scrun alike, the
    run ends with 255, and nothing is left (no job, no state). With the anchor in conmon's
    group, conmon killed itself: podman waited for the container's own end, then failed
    (127), and the job stayed."""
    through_crun = podman("run", "--rm", "--timeout", "1", IMAGE, "sleep", "60", timeout=120)
    assert through_crun.returncode == 255, through_crun.stderr
    done = podman.scrun("run", "--rm", "--timeout", "2", IMAGE, "sleep", "60", timeout=120)
    assert done.returncode == through_crun.returncode, done.stderr


# ----------------------------------------------------------------------------- stdio


def test_stdin_reaches_the_container(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "-i", "--rm", IMAGE, "cat", input="data\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "data\n"


def test_50_mb_through_stdin_and_stdout_intact(
    podman: Podman, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    source = tmp_path / "in.bin"
    sink = tmp_path / "out.bin"
    with source.open("wb") as stream:
        for _ in range(50):
            stream.write(os.urandom(1024 * 1024))
    with source.open("rb") as stdin, sink.open("wb") as stdout:
        done = podman.scrun(
            "run", "-i", "--rm", IMAGE, "cat", stdin=stdin, stdout=stdout, timeout=180
        )
    assert done.returncode == 0, done.stderr
    assert sink.stat().st_size == 50 * 1024 * 1024
    assert sha256(sink) == sha256(source)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_stderr_stays_separate(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "--rm", IMAGE, "sh", "-c", "echo out; echo err >&2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "out\n"
    assert "err" in done.stderr
    assert "err" not in done.stdout


def test_tty_under_a_pty(cluster: Cluster, no_leftovers: Callable[..., None]) -> None:
    """`podman run -t` from a terminal: the container's stdin and stdout are a terminal,
    which `tty` names.

    Slurm 22.05 forces process.terminal=false in the container's own config, but
    `srun --pty` hands the task a pty, the node's (/dev/pts/N of the host devpts): scrun
    binds the node's /dev/pts into a terminal container there so that ttyname() finds it.
    From 23.02 the runtime makes the pty, in the container's own /dev/pts."""
    inner = "[ -t 0 ] && echo IN-TTY; [ -t 1 ] && echo OUT-TTY; tty; echo T-OK"
    podman_argv = [*SCRUN_PODMAN, "run", "-t", "--rm", IMAGE, "sh", "-c", inner]
    done = cluster.run(
        ["script", "-qec", shlex.join(podman_argv), "/dev/null"],
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.replace("\r", "").splitlines()
    assert "T-OK" in lines, done.stdout
    assert "IN-TTY" in lines, done.stdout
    assert "OUT-TTY" in lines, done.stdout
    assert any(re.fullmatch(r"/dev/pts/\d+", line) for line in lines), done.stdout


# ----------------------------------------------------------------------------- signals


def test_signal_reaches_the_trap_and_stop_ends_it(
    cluster: Cluster,
    podman: Podman,
    container_name: str,
    no_leftovers: Callable[..., None],
) -> None:
    script = 'trap "echo got-usr1" USR1; echo "ready $SLURM_JOB_ID"; while true; do sleep 1; done'
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sh", "-c", script)
    assert started.returncode == 0, started.stderr

    logs: list[subprocess.CompletedProcess[str]] = []

    def log_has(text: str) -> Callable[[], bool]:
        def probe() -> bool:
            logs.append(podman.scrun("logs", container_name))
            return text in logs[-1].stdout

        return probe

    def last_logs() -> str:
        return f"podman logs: {logs[-1].stdout!r} (stderr {logs[-1].stderr!r})"

    # the trap is set once "ready" is printed: only then may USR1 be sent
    wait_for("the container's 'ready' line in podman logs", log_has("ready"), 20, last_logs)
    match = re.search(r"ready ([0-9]+)", logs[-1].stdout)
    assert match, logs[-1].stdout
    job_id = match.group(1)
    assert job_id in job_ids_in_squeue(cluster)

    killed = podman.scrun("kill", "-s", "USR1", container_name)
    assert killed.returncode == 0, killed.stderr
    wait_for("got-usr1 in podman logs", log_has("got-usr1"), 10, last_logs)
    running = podman.scrun("inspect", "--format", "{{.State.Status}}", container_name)
    assert running.stdout.strip() == "running", "USR1 must not end the container"

    # sh is the container's pid 1 and has no TERM handler: stop needs its SIGKILL
    stopped = podman.scrun("stop", "-t", "2", container_name, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    inspected = podman.scrun(
        "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container_name
    )
    assert inspected.stdout.split() == ["exited", "137"], inspected.stderr
    removed = podman.scrun("rm", container_name)
    assert removed.returncode == 0, removed.stderr
    wait_for(
        f"job {job_id} gone from squeue",
        lambda: job_id not in job_ids_in_squeue(cluster),
        15,
        lambda: "still listed",
    )


def test_stop_right_after_run_reaches_the_trap(
    podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """`podman run -d` then `podman stop` at once, as a workflow runner cancelling a step
    does: the SIGTERM reaches the container's handler, as through crun, though its process
    starts on the node only after `start` has returned (a signal sent then was lost half
    the time, and stop ended the container with SIGKILL after its timeout). Four times."""
    script = 'trap "exit 3" TERM; sleep 60 & wait'
    for attempt in range(4):
        started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sh", "-c", script)
        assert started.returncode == 0, started.stderr
        stopped = podman.scrun("stop", "-t", "30", container_name, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        inspected = podman.scrun("inspect", "--format", "{{.State.ExitCode}}", container_name)
        assert (attempt, inspected.stdout.strip()) == (attempt, "3"), inspected.stderr
        removed = podman.scrun("rm", container_name)
        assert removed.returncode == 0, removed.stderr


# ----------------------------------------------------------------------------- concurrency


def test_eight_containers_at_once(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    def one(index: int) -> subprocess.CompletedProcess[str]:
        return podman.scrun(
            "run", "--rm", "-e", f"I={index}", IMAGE, "sh", "-c", "echo n$I", timeout=180
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(8)))
    for index, done in enumerate(results):
        assert (done.returncode, done.stdout) == (0, f"n{index}\n"), done.stderr


# ----------------------------------------------------------------------------- create errors


def test_bad_scrun_variable_fails_create(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "--rm", "-e", "SCRUN_TIMELIMIT=soon", IMAGE, "true")
    assert done.returncode == 126, (done.stdout, done.stderr)
    assert "SCRUN_TIMELIMIT" in done.stderr
    no_leftovers()


def test_joining_another_containers_namespace_fails_create(
    cluster: Cluster, podman: Podman, container_name: str, no_leftovers: Callable[..., None]
) -> None:
    """`--network container:X` names X's anchor's namespace on the login host, which no
    compute node has: create refuses it in one line, before any job is asked for."""
    started = podman.scrun("run", "-d", "--name", container_name, IMAGE, "sleep", "300")
    assert started.returncode == 0, started.stderr
    jobs = job_ids_in_squeue(cluster)
    done = podman.scrun("run", "--rm", "--network", f"container:{container_name}", IMAGE, "true")
    assert done.returncode == 126, (done.stdout, done.stderr)
    assert "joins the network namespace of another process on this host" in done.stderr
    assert job_ids_in_squeue(cluster) == jobs
    removed = podman.scrun("rm", "-f", "-t", "0", container_name)
    assert removed.returncode == 0, removed.stderr
    no_leftovers()


def test_refused_allocation_fails_create(podman: Podman, no_leftovers: Callable[..., None]) -> None:
    done = podman.scrun("run", "--rm", "-e", "SCRUN_PARTITION=nope", IMAGE, "true")
    assert done.returncode == 126, (done.stdout, done.stderr)
    assert "allocation refused" in done.stderr.lower(), done.stderr
    no_leftovers()
