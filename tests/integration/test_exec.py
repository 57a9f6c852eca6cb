"""`podman exec` into a container that runs as a Slurm job: a new step of the container's
job on the node of its task 0, entering it through the node's crun. Output, stdin, a tty
and the exit code come back; nothing is left (no step, no process)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import SCRUN_PODMAN, assert_terminal_session, session_on_terminal, wait_for

if TYPE_CHECKING:
    from conftest import Cluster, Podman

IMAGE = "localhost/busybox"
SCRUN = str(Path(sys.prefix) / "bin" / "scrun")


@pytest.fixture
def running(podman: Podman, no_leftovers: Callable[..., None]) -> Iterator[Callable[..., str]]:
    """`running(*podman_run_options, program)` starts a container (-d) and returns its
    name; it is removed at the end, and the exec steps must be gone by then."""
    names: list[str] = []

    def start(*options: str, program: str = "sleep 300") -> str:
        name = f"scrun-exec-{uuid.uuid4().hex[:10]}"
        names.append(name)
        done = podman.scrun("run", "-d", "--name", name, *options, IMAGE, "sh", "-c", program)
        assert done.returncode == 0, done.stderr
        return name

    yield start
    for name in names:
        podman.scrun("rm", "-f", "-t", "0", name)


def steps_of(cluster: Cluster, name: str) -> list[str]:
    """The steps of the cluster named `name`: "JOB.STEP NODES" each."""
    done = cluster.run(["squeue", "-h", "-s", "-o", "%i %j %N"])
    return [
        f"{i} {nodes}"
        for i, j, nodes in (line.split() for line in done.stdout.splitlines())
        if j == name
    ]


def test_exec_runs_in_the_container_with_env_cwd_user_and_exit_code(
    cluster: Cluster, podman: Podman, running: Callable[..., str]
) -> None:
    """Also what only podman's whole process carries: the container's supplementary
    groups (--group-add) are the exec's too, as through crun."""
    name = running("--group-add", "10")
    done = podman.scrun(
        "exec", "-e", "WHO=exec", "-w", "/tmp", "-u", "65534", name,
        "sh", "-c", "echo $WHO $PWD $(id -u); exit 4",
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert done.stdout == "exec /tmp 65534\n", done
    cid = podman.scrun("inspect", "-f", "{{.ID}}", name).stdout.strip()
    job_id = json.loads(cluster.run([SCRUN, "state", cid]).stdout)["jobId"]
    assert [step.split()[0] for step in steps_of(cluster, "scrun")] == [f"{job_id}.0"]

    groups = podman.scrun("exec", name, "id", "-G")
    assert groups.returncode == 0, groups.stderr
    assert "10" in groups.stdout.split(), groups.stdout

    fed = podman.scrun("exec", "-i", name, "sh", "-c", "read x; echo got $x", input="hi\n")
    assert (fed.returncode, fed.stdout) == (0, "got hi\n"), fed.stderr

    detached = podman.scrun("exec", "-d", name, "sh", "-c", "echo bg > /tmp/bg")
    assert detached.returncode == 0, detached.stderr
    wait_for(
        "the detached exec's file",
        lambda: podman.scrun("exec", name, "cat", "/tmp/bg").stdout == "bg\n",
        30,
    )
    wait_for("no exec step left", lambda: not steps_of(cluster, "scrun-exec"), 15)


def test_exec_with_a_terminal_sees_its_size_and_its_changes(
    cluster: Cluster, running: Callable[..., str]
) -> None:
    name = running()
    assert_terminal_session([*SCRUN_PODMAN, "exec", "-it", name], cluster.env)


def test_exec_with_a_terminal_names_it(cluster: Cluster, running: Callable[..., str]) -> None:
    """The process's terminal is one of the container's own /dev/pts (issue 31: `podman
    exec -t C tty` printed `not a tty`, the step's pty being the node's)."""
    podman = shlex.join([*SCRUN_PODMAN, "exec", "-t", running(), "sh", "-c", "tty; tty <&1"])
    done = subprocess.run(["script", "-qec", podman, "/dev/null"], env=cluster.env, cwd="/",
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert re.fullmatch(rb"(/dev/pts/\d+\r\n){2}", done.stdout), done.stdout


def test_exec_with_a_terminal_under_script_shows_no_stray_byte(
    cluster: Cluster, running: Callable[..., str]
) -> None:
    """issue 31's `script -qec "stty rows 33 cols 101; podman exec -it C stty size"` shows
    the size alone. script's stdin stays open: at its end, script writes an end-of-file
    character into the session, which podman passes on as typed input (`^@` echoed), with
    crun as with scrun; that byte is the caller's. crun's exec sizes the container's pty
    while the process starts: a `stty size` first thing found none 5 runs in 20 under
    podman and plain crun, so the size is read a moment later."""
    podman = shlex.join([*SCRUN_PODMAN, "exec", "-it", running(), "sh", "-c", "sleep 1; stty size"])
    argv = ["script", "-qec", f"stty rows 33 cols 101; {podman}", "/dev/null"]
    with subprocess.Popen(
        argv, env=cluster.env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as session:
        assert session.stdout is not None
        shown = session.stdout.read()  # until the session ends, its stdin still open
        assert session.wait(timeout=60) == 0, shown
    assert shown == b"33 101\r\n", shown


def test_exec_with_a_terminal_ends_with_ctrl_d(
    cluster: Cluster, running: Callable[..., str]
) -> None:
    """Ctrl-D is the end of the input, as on any terminal."""
    name = running()
    argv = [*SCRUN_PODMAN, "exec", "-it", name]
    program = "echo ready; cat; echo end of input $?"
    code, shown = session_on_terminal(
        [*argv, "sh", "-c", program], cluster.env, (24, 80), b"ready", b"line\r\x04"
    )
    assert code == 0, shown
    assert b"line\r\n" in shown and shown.endswith(b"end of input 0\r\n"), shown


def test_exec_reaches_the_node_of_task_0(
    cluster: Cluster, podman: Podman, running: Callable[..., str]
) -> None:
    """The container's task 0 and the exec's one task run on the same node (squeue's node
    lists: the container's step spans two nodes, task 0 on the first)."""
    name = running(
        "-e", "SCRUN_JOB_NUM_NODES=2", program="while [ ! -e /stop ]; do sleep 0.1; done"
    )
    until_go = "while [ ! -e /go ]; do sleep 0.1; done"
    argv = [*SCRUN_PODMAN, "exec", name, "sh", "-c", until_go]
    waiting = subprocess.Popen(argv, env=cluster.env)
    try:
        exec_step = wait_for("the exec step", lambda: steps_of(cluster, "scrun-exec"), 60)
        exec_nodes = exec_step[0].split()[1]
        container_nodes = steps_of(cluster, "scrun")[0].split()[1]
        first = cluster.run(["scontrol", "show", "hostnames", container_nodes]).stdout.split()
        assert len(first) == 2 and exec_nodes == first[0], (exec_step, container_nodes)
    finally:
        podman.scrun("exec", name, "touch", "/go", "/stop")
        waiting.wait(timeout=60)


def test_a_failing_process_shows_its_own_stderr_only(
    podman: Podman, running: Callable[..., str]
) -> None:
    """A non-zero exit says it in the exit code alone, as with crun: srun adds no `srun:
    error: NODE: task 0: Exited with exit code N` line; a line of the process's own that
    looks like it passes untouched. A command that cannot start exits as through crun."""

    def failing(code: int) -> tuple[str, list[str]]:
        line = f"srun: error: n1: task 0: Exited with exit code {code}\n"
        return line, ["sh", "-c", f"printf '{line}' >&2; exit {code}"]

    line, argv = failing(4)
    name = running()
    done = podman.scrun("exec", name, *argv)
    assert (done.returncode, done.stderr) == (4, line), done
    # a command crun cannot start: 127, 126, as through crun (scrun-cdi-run; crun's 255 or 1)
    missing = podman.scrun("exec", name, "no-such-program")
    assert missing.returncode == 127, missing.stderr
    assert "executable file `no-such-program` not found" in missing.stderr, missing.stderr
    denied = podman.scrun("exec", name, "/etc/passwd")
    assert (denied.returncode, "executable" in denied.stderr) == (126, True), denied.stderr
    line, argv = failing(3)
    ran = podman.scrun("run", "--rm", IMAGE, *argv)
    assert (ran.returncode, ran.stderr) == (3, line), ran


def test_exec_into_a_container_that_does_not_run(
    cluster: Cluster, podman: Podman, running: Callable[..., str]
) -> None:
    name = running(program="exit 0")
    cid = podman.scrun("inspect", "-f", "{{.ID}}", name).stdout.strip()
    waited = podman.scrun("wait", name, timeout=60)
    assert waited.stdout.strip() == "0", waited
    assert podman.scrun("exec", name, "true").returncode != 0
    refused = cluster.run([SCRUN, "exec", cid, "true"])
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert re.search(r"is stopped: cannot exec|does not exist", refused.stderr), refused.stderr
