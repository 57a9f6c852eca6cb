"""GPUs (issue 30): the GPUs Slurm allocates on the node reach the container, and only those.

The cluster's GPUs are fake (harness/node.sh): device nodes of NVIDIA's major 195 with no
driver, n1's /dev/nvidia0-1 and n2's /dev/nvidia2-3, each in its node's own /dev, plus
/dev/nvidiactl; opening an allowed one fails with ENXIO, one the job's device cgroup denies
with EPERM, an absent one with ENOENT. Each node's CDI spec (/run/cdi/nvidia.json, devices
named by their index on the node) adds a library directory, environment and a
createContainer hook that writes the node's name into the container's /dev/.cdi-hook-mark.
scrun-cdi-run (oci.conf's RunTimeRun) applies it for the step's GPUs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import node_roots
from helpers import wait_for
from users import pick_users

if TYPE_CHECKING:
    from conftest import Cluster, Docker, Podman
    from users import User

IMAGE = "localhost/busybox"
GPUS_PER_NODE = 2
FIRST_MINOR = {"n1": 0, "n2": 2}
# What the container reports: one `key=value` a line
REPORT = r"""
echo "node=$FAKE_GPU_NODE"
echo "devices=$(cd /dev && ls -d nvidia* 2>/dev/null | tr '\n' ' ')"
for d in /dev/nvidia*; do echo "open $d=$(cat "$d" 2>&1 | sed 's/.*: //')"; done
echo "mark=$(cat /dev/.cdi-hook-mark 2>&1)"
echo "lib=$(ls /usr/local/nvidia/lib 2>&1 | tr '\n' ' ')"
echo "cuda=$CUDA_VISIBLE_DEVICES"
echo "ordinal=$GPU_DEVICE_ORDINAL"
echo "step_gpus=$SLURM_STEP_GPUS"
echo "nvidia_env=$NVIDIA_VISIBLE_DEVICES"
"""
HOLD = 'trap "exit 0" TERM; sleep 60 & wait'
NO_SUCH_DEVICE = "No such device or address"  # ENXIO: allowed, no driver


def report(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def assert_given(seen: dict[str, str], count: int) -> list[int]:
    """The container saw exactly `count` of its node's GPUs (+ nvidiactl), each allowed, with
    the spec's mounts, environment and the hook's mark; returns the indexes on the node."""
    node = seen["node"]
    assert node in FIRST_MINOR, seen
    indexes = [int(i) for i in seen["step_gpus"].split(",")]
    assert len(indexes) == count and all(0 <= i < GPUS_PER_NODE for i in indexes), seen
    given = sorted(f"nvidia{FIRST_MINOR[node] + i}" for i in indexes)
    assert seen["devices"].split() == [*given, "nvidiactl"], seen
    for name in [*given, "nvidiactl"]:
        assert seen[f"open /dev/{name}"] == NO_SUCH_DEVICE, seen
    # numbered from 0 (ConstrainDevices), also in the vendor-neutral GPU_DEVICE_ORDINAL
    assert seen["cuda"] == seen["ordinal"] == ",".join(str(i) for i in range(count)), seen
    assert seen["mark"] == node, seen
    assert seen["lib"].split() == ["libcuda.so.1"], seen
    assert seen["nvidia_env"] == "void", seen
    return indexes


def assert_none(seen: dict[str, str]) -> None:
    assert seen["devices"] == "", seen
    assert seen["node"] == "" and seen["cuda"] == "" and seen["lib"] != "libcuda.so.1", seen
    assert "No such file" in seen["mark"], seen


@pytest.fixture(scope="module")
def users(cluster: Cluster) -> tuple[User, User]:
    return pick_users(cluster.env, cluster["SLURM_CONF"])


def podman_run(podman: Podman, *args: str) -> subprocess.CompletedProcess[str]:
    return podman.scrun("run", "--rm", *args, timeout=180)


# ----------------------------------------------------------------------------- the cluster


def test_the_nodes_devices_are_allowed_denied_and_absent_by_the_jobs_gres(
    cluster: Cluster,
) -> None:
    """A plain step (no container) with one GPU of n1: the given one opens to ENXIO, the
    other of n1 is denied by the job's device cgroup (EPERM), n2's are absent (ENOENT); a
    job without a GPU request is denied both."""
    script = (
        "for d in 0 1 2; do cat /dev/nvidia$d 2>&1 | sed 's/.*: //'; done; echo $SLURM_STEP_GPUS"
    )
    done = cluster.run(["srun", "-w", "n1", "--gres=gpu:1", "sh", "-c", script], timeout=60)
    lines = done.stdout.splitlines()
    given = int(lines[3])
    expected = ["Operation not permitted"] * 2 + ["No such file or directory"]
    expected[given] = NO_SUCH_DEVICE
    assert lines[:3] == expected, done
    done = cluster.run(["srun", "-w", "n1", "sh", "-c", script], timeout=60)
    assert done.stdout.splitlines()[:2] == ["Operation not permitted"] * 2, done


# ----------------------------------------------------------------------------- podman


@pytest.mark.parametrize(
    ("variables", "count"),
    [
        (["SCRUN_GPUS=1"], 1),
        (["SCRUN_GRES=gpu:1"], 1),
        (["SCRUN_GPUS_PER_NODE=2"], 2),
        # Slurm refuses --gpus-per-task without a task count
        (["SCRUN_GPUS_PER_TASK=1", "SCRUN_NTASKS=1"], 1),
    ],
    ids=["gpus", "gres", "gpus-per-node", "gpus-per-task"],
)
def test_root_podman_container_sees_its_gpus(
    podman: Podman, no_leftovers: Callable[..., None], variables: list[str], count: int
) -> None:
    options = [arg for variable in variables for arg in ("-e", variable)]
    done = podman_run(podman, *options, IMAGE, "sh", "-c", REPORT)
    assert done.returncode == 0, done
    assert_given(report(done.stdout), count)


def test_a_container_without_a_request_sees_none(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    done = podman_run(podman, IMAGE, "sh", "-c", REPORT)
    assert done.returncode == 0, done
    assert_none(report(done.stdout))


@pytest.mark.parametrize("which", [0, 1], ids=["scruntest", "scruntest2"])
@pytest.mark.parametrize(
    ("variable", "count"),
    [("SCRUN_GPUS=1", 1), ("SCRUN_GRES=gpu:2", 2), ("SCRUN_GPUS_PER_NODE=1", 1)],
)
def test_rootless_podman_container_sees_its_gpus(
    users: tuple[User, User],
    no_leftovers: Callable[..., None],
    which: int,
    variable: str,
    count: int,
) -> None:
    person = users[which]
    done = person.podman("run", "--rm", "-e", variable, IMAGE, "sh", "-c", REPORT)
    assert done.returncode == 0, done
    assert_given(report(done.stdout), count)
    done = person.podman("run", "--rm", IMAGE, "sh", "-c", REPORT)
    assert done.returncode == 0, done
    assert_none(report(done.stdout))


@pytest.fixture
def detached(podman: Podman, no_leftovers: Callable[..., None]) -> Iterator[Callable[..., str]]:
    started: list[str] = []

    def start(*args: str) -> str:
        done = podman.scrun("run", "-d", *args)
        assert done.returncode == 0, done
        started.append(done.stdout.strip().splitlines()[-1])
        return started[-1]

    yield start
    for container_id in started:
        podman.scrun("stop", "-t", "10", container_id)
        podman.scrun("rm", "-f", "-t", "0", container_id)


def test_two_containers_on_one_node_see_different_gpus(
    podman: Podman, detached: Callable[..., str]
) -> None:
    script = REPORT + 'echo "done=1"; ' + HOLD
    ids = [
        detached("-e", "SCRUN_GPUS=1", "-e", "SCRUN_JOB_NODELIST=n2", IMAGE, "sh", "-c", script)
        for _ in range(2)
    ]

    def reported(container_id: str) -> dict[str, str] | None:
        seen = report(podman.scrun("logs", container_id).stdout)
        return seen if "done" in seen else None

    seen = [wait_for(f"the report of {c[:12]}", lambda c=c: reported(c)) for c in ids]
    given = [assert_given(s, 1) for s in seen]
    assert [s["node"] for s in seen] == ["n2", "n2"]
    assert sorted(given) == [[0], [1]], seen


# ----------------------------------------------------------------------------- docker


@pytest.mark.parametrize(("variable", "count"), [("SCRUN_GPUS=1", 1), ("SCRUN_GPUS=2", 2)])
def test_root_docker_container_sees_its_gpus(
    docker: Docker, no_leftovers: Callable[..., None], variable: str, count: int
) -> None:
    done = docker(
        "run", "--rm", "--runtime", "scrun", "-e", variable, "-e", "SCRUN_JOB_NUM_NODES=1",
        IMAGE, "sh", "-c", REPORT, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done
    assert_given(report(done.stdout), count)


# ----------------------------------------------------------------------------- errors


def test_a_request_the_partition_cannot_satisfy_is_slurms_refusal(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    done = podman_run(podman, "-e", "SCRUN_GPUS_PER_NODE=3", IMAGE, "true")
    assert done.returncode != 0, done
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr
    assert "Requested node configuration is not available" in errors[0], done.stderr


@pytest.fixture
def n2_spec(cluster: Cluster) -> Iterator[Path]:
    """n2's CDI spec, as this host sees it; put back as it was after the test."""
    spec = node_roots(cluster.env)["n2"] / "run" / "cdi" / "nvidia.json"
    kept = spec.with_name(f".kept-{uuid.uuid4().hex[:8]}")
    shutil.copy2(spec, kept)
    try:
        yield spec
    finally:
        kept.replace(spec)


def on_n2(podman: Podman, *args: str) -> subprocess.CompletedProcess[str]:
    return podman_run(podman, "-e", "SCRUN_GPUS=1", "-e", "SCRUN_JOB_NODELIST=n2", *args)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert lines, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda spec: spec.unlink(), r"node n2: no CDI spec of kind nvidia\.com/gpu in /etc/cdi"),
        (
            lambda spec: spec.write_text(
                re.sub(r'"name": "[01]"', '"name": "9"', spec.read_text())
            ),
            r"node n2: /var/run/cdi/nvidia\.json: no device nvidia\.com/gpu=[01]",
        ),
        (lambda spec: spec.write_text("{"), r"node n2: /var/run/cdi/nvidia\.json: not a CDI spec"),
    ],
    ids=["missing", "no-device", "malformed"],
)
def test_a_node_whose_spec_cannot_give_the_gpu_says_so(
    podman: Podman,
    no_leftovers: Callable[..., None],
    n2_spec: Path,
    change: Callable[[Path], None],
    expected: str,
) -> None:
    change(n2_spec)
    line = one_error_line(on_n2(podman, IMAGE, "true"))
    assert re.search(r"scrun-cdi-run: error: " + expected, line), line


def test_an_unreadable_spec_is_named(
    users: tuple[User, User], no_leftovers: Callable[..., None], n2_spec: Path
) -> None:
    n2_spec.chmod(0o600)
    done = users[0].podman(
        "run", "--rm", "-e", "SCRUN_GPUS=1", "-e", "SCRUN_JOB_NODELIST=n2", IMAGE, "true"
    )
    line = one_error_line(done)
    assert "node n2: /var/run/cdi/nvidia.json: Permission denied" in line, line


def test_a_failing_hook_fails_the_container(
    podman: Podman, no_leftovers: Callable[..., None]
) -> None:
    """The fake hook fails for a container with the annotation fake-gpu-hook=fail.

    crun 1.8 (Debian 12) then says a second error, its container process's "executable
    path not specified", and either line can reach the pipe first: the hook's must be there."""
    done = podman_run(
        podman, "-e", "SCRUN_GPUS=1", "--annotation", "fake-gpu-hook=fail", IMAGE, "true"
    )
    assert done.returncode != 0, done
    hook_failed = "error executing hook `/run/nvidia-driver/bin/nvidia-cdi-hook` (exit code: 3)"
    assert hook_failed in done.stderr, done.stderr


# ----------------------------------------------------------------------------- engines' GPU options
# The login host has scrun's marker spec (`scrun-cdi login-spec`, cluster-up.sh) and dockerd
# scrun's stub hook (`scrun-cdi docker-hook`, docker-up.sh): the engines resolve their own
# GPU options and call scrun, which makes docker's count the job's request and refuses the
# rest in one line naming SCRUN_GPUS_PER_NODE (scrunlib.engine_gpus).

PINNED = "names GPUs of one host, which Slurm cannot pin on a node: ask for a count"
EVERY = "asks for every GPU of one host, which Slurm cannot pin on a node: ask for a count"


def assert_refused(done: subprocess.CompletedProcess[str], refusal: str) -> None:
    """Failed with scrun's one line: podman shows it as `scrun: MESSAGE` (the message of
    scrun's JSON log line), docker as `OCI runtime create failed: MESSAGE: unknown`."""
    assert done.returncode != 0, done
    assert [line for line in done.stderr.splitlines() if refusal in line], done.stderr
    assert done.stderr.count(refusal) == 1, done.stderr


def podman_major(run: Callable[..., subprocess.CompletedProcess[str]]) -> int:
    version = run("version", "--format", "{{.Client.Version}}").stdout.strip()
    return int(version.split(".")[0])


# (options, what scrun says; None: podman 4.3 dropped the option, the container has no GPU)
PODMAN_OPTIONS = [
    (["--device", "nvidia.com/gpu=0"], f"--device nvidia.com/gpu=0 (or podman's --gpus 0) "
                                        f"{PINNED}, -e SCRUN_GPUS_PER_NODE=1"),
    (["--device", "nvidia.com/gpu=all"], f"--device nvidia.com/gpu=all (or podman's --gpus "
                                          f"all) {EVERY}, -e SCRUN_GPUS_PER_NODE=N"),
    (["--gpus", "1"], f"--device nvidia.com/gpu=1 (or podman's --gpus 1) {PINNED}, "
                      "-e SCRUN_GPUS_PER_NODE=1"),
    (["--gpus", "all"], f"--device nvidia.com/gpu=all (or podman's --gpus all) {EVERY}, "
                        "-e SCRUN_GPUS_PER_NODE=N"),
]  # fmt: skip


def check_podman_option(
    run: Callable[..., subprocess.CompletedProcess[str]], options: list[str], refusal: str
) -> None:
    done = run("run", "--rm", *options, IMAGE, "sh", "-c", REPORT)
    if options[0] == "--gpus" and podman_major(run) < 5:
        # podman 4.3 takes --gpus and drops it: nothing of it reaches scrun
        assert done.returncode == 0, done
        assert_none(report(done.stdout))
        return
    assert_refused(done, refusal)


@pytest.mark.parametrize(
    ("options", "refusal"), PODMAN_OPTIONS, ids=["0", "all", "gpus-1", "gpus-all"]
)
def test_root_podmans_own_gpu_options_reach_scrun_and_are_refused(
    podman: Podman, no_leftovers: Callable[..., None], options: list[str], refusal: str
) -> None:
    """A CDI name is one host's device (podman 5's --gpus N is nvidia.com/gpu=N, GPU N, not
    N GPUs): Slurm picks a node's GPUs itself, so scrun refuses it before it makes anything."""
    check_podman_option(podman.scrun, options, refusal)


@pytest.mark.parametrize(
    ("options", "refusal"), PODMAN_OPTIONS, ids=["0", "all", "gpus-1", "gpus-all"]
)
def test_rootless_podmans_own_gpu_options_reach_scrun_and_are_refused(
    users: tuple[User, User], no_leftovers: Callable[..., None], options: list[str], refusal: str
) -> None:
    check_podman_option(users[0].podman, options, refusal)


@pytest.mark.parametrize("count", [1, 2])
def test_dockers_gpus_count_is_the_jobs_gpus_per_node(
    docker: Docker, no_leftovers: Callable[..., None], count: int
) -> None:
    """dockerd's NVIDIA driver (the stub on its PATH) writes --gpus N as a hook and
    NVIDIA_VISIBLE_DEVICES=0,…,N-1; scrun drops both and asks for N GPUs on the node, which
    the node's CDI spec gives the container."""
    script = REPORT + 'echo "request=$SCRUN_GPUS_PER_NODE"'
    done = docker("run", "--rm", "--runtime", "scrun", "--gpus", str(count), IMAGE,
                  "sh", "-c", script, timeout=180)  # fmt: skip
    assert done.returncode == 0, done
    seen = report(done.stdout)
    assert_given(seen, count)
    assert seen["request"] == str(count), seen


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (["--gpus", "all"], "docker's --gpus all asks for every GPU of one host, which Slurm "
                            "cannot pin on a node: ask for a count, --gpus N or "
                            "-e SCRUN_GPUS_PER_NODE=N"),
        (["--gpus", "device=1"], "docker's --gpus device=1 asks for GPUs of one host by their "
                                 "ids, which Slurm cannot pin on a node: ask for a count, "
                                 "--gpus N or -e SCRUN_GPUS_PER_NODE=N"),
        (["--gpus", "1", "-e", "SCRUN_GPUS=1"], "docker's --gpus 1 and SCRUN_GPUS=1 both ask "
                                                "for GPUs: give one"),
    ],
    ids=["all", "device", "both"],
)  # fmt: skip
def test_dockers_other_gpu_requests_are_refused(
    docker: Docker, no_leftovers: Callable[..., None], options: list[str], refusal: str
) -> None:
    done = docker("run", "--rm", "--runtime", "scrun", *options, IMAGE, "true", timeout=120)
    assert_refused(done, refusal)


def test_dockers_cdi_name_is_refused_by_scrun_where_docker_has_cdi(
    docker: Docker, no_leftovers: Callable[..., None]
) -> None:
    """docker ≥ 25 with CDI on resolves the name against the marker spec; docker 20.10's
    client takes it for a device path and refuses it itself, before dockerd."""
    done = docker("run", "--rm", "--runtime", "scrun", "--device", "nvidia.com/gpu=0",
                  IMAGE, "true", timeout=120)  # fmt: skip
    server = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    if int(server.split(".")[0]) < 25:
        assert done.returncode == 125 and "is not an absolute path" in done.stderr, done
        return
    assert_refused(
        done, f"--device nvidia.com/gpu=0 (or podman's --gpus 0) {PINNED}, -e SCRUN_GPUS_PER_NODE=1"
    )
