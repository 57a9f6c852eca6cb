"""Containers whose job waits in Slurm's queue: made to wait on demand (a held job they
depend on, a blocker job that holds every node, drained nodes), through real podman and
docker. `create` returns at once, the container is listed as running, the user is told why
it waits, everything the user does meanwhile works, and nothing is left afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from conftest import Cluster, Docker, Podman, SiteRuntime
from helpers import local_popen, salloc_of, scrun_podman, wait_for
from plumbum.commands.base import BaseCommand
from scrunlib.slurm_commands import tagged_container

IMAGE = "localhost/busybox"
# Notices soon and reasons read often: the site's defaults (5 s, 30 s) would slow the tests.
QUICK_QUEUE = {"pending_notice": 1, "queue_poll": 5}


class Queue:
    """The cluster's queue as the tests drive it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.jobs: list[int] = []  # the jobs made here: cancelled at the end

    def held_job(self) -> int:
        """A job that waits until released: a container that depends on it waits too."""
        return self._sbatch("--hold", "--wrap", "true")

    def blocker(self, seconds: int = 600) -> int:
        """A running job that holds every CPU of every node: other jobs wait (Resources)."""
        job = self._sbatch("--exclusive", "-N2", "--wrap", f"sleep {seconds}")
        wait_for(f"blocker {job} to run", lambda: self.state(job)[0] == "RUNNING", 60)
        return job

    def running_job(self, seconds: int) -> int:
        """A job that runs for `seconds` on one CPU: a container can depend on its end."""
        return self._sbatch("--wrap", f"sleep {seconds}")

    def _sbatch(self, *args: str) -> int:
        done = self.cluster.run(["sbatch", "--parsable", "-o", "/dev/null", *args], timeout=30)
        assert done.returncode == 0, done.stderr
        job = int(done.stdout.strip().split(";")[0])
        self.jobs.append(job)
        return job

    def release(self, job: int) -> None:
        done = self.cluster.run(["scontrol", "release", str(job)], timeout=30)
        assert done.returncode == 0, done.stderr

    def cancel(self, job: int) -> None:
        self.cluster.run(["scancel", str(job)], timeout=30)

    def state(self, job: int) -> tuple[str, str]:
        """(JobState, Reason) from squeue; ("", "") once it has left the queue."""
        done = self.cluster.run(["squeue", "-h", "-j", str(job), "-o", "%T|%r"], timeout=30)
        state, _, reason = done.stdout.strip().partition("|")
        return state, reason

    def container_job(self, container_id: str, timeout: float = 30) -> int:
        """The job of the container whose id starts with `container_id` (its job tag)."""
        found: list[int] = []

        def listed() -> bool:
            done = self.cluster.run(["squeue", "-h", "-o", "%i %k"], timeout=30)
            for line in done.stdout.splitlines():
                job, _, comment = line.partition(" ")
                tag = tagged_container(comment.strip()) or ""
                if tag and tag.startswith(container_id):
                    found.append(int(job))
                    return True
            return False

        wait_for(f"a job of container {container_id}", listed, timeout)
        return found[0]


@pytest.fixture
def queue(cluster: Cluster) -> Iterator[Queue]:
    made = Queue(cluster)
    yield made
    for job in made.jobs:
        made.cancel(job)


@pytest.fixture
def quick_site(cluster: Cluster, site_runtime: Callable[..., SiteRuntime]) -> SiteRuntime:
    """The cluster's own staging scrun.lua, with quick queue notices."""
    lua = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()
    return site_runtime(lua, settings=QUICK_QUEUE)


class Background:
    """A command running in the background (a `podman run` the test acts on meanwhile):
    its stdout is piped, its stderr goes to a file, so that what it has said so far can be
    read while it runs (a queued job's notices)."""

    def __init__(self, command: BaseCommand, env: dict[str, str]) -> None:
        self._stderr = tempfile.NamedTemporaryFile("w+", prefix="scrun-queued-")  # noqa: SIM115
        self.proc = local_popen(
            command, env=env, stdin=subprocess.DEVNULL, stderr=self._stderr, encoding="utf-8"
        )

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def stderr(self) -> str:
        return Path(self._stderr.name).read_text()

    def wait_for_stderr(self, text: str, timeout: float) -> None:
        """Until `text` is in its stderr: the notice the test waits for."""
        wait_for(repr(text), lambda: text in self.stderr(), timeout, self.stderr)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Its stdout and stderr, once it has ended (within `timeout` s)."""
        out, _ = self.proc.communicate(timeout=timeout)
        return out, self.stderr()

    def end(self) -> None:
        """Killed if it still runs; its stderr file removed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._stderr.close()


@contextmanager
def running(command: BaseCommand, env: dict[str, str]) -> Iterator[Background]:
    """`command` in the background; killed at the end if it is still running."""
    run = Background(command, env)
    try:
        yield run
    finally:
        run.end()


def podman_id(site: SiteRuntime, name: str) -> str:
    """The id of the container `name`, once podman has created it."""
    ids: list[str] = []

    def created() -> bool:
        done = site.podman("inspect", "--format", "{{.Id}}", name)
        if done.returncode == 0 and done.stdout.strip():
            ids.append(done.stdout.strip())
            return True
        return False

    wait_for(f"podman to create {name}", created, 60)
    return ids[0]


def scrun_state(site: SiteRuntime, container_id: str) -> dict[str, object]:
    done = site.scrun("state", container_id, timeout=30)
    assert done.returncode == 0, done.stderr
    state: dict[str, object] = json.loads(done.stdout)
    return state


# -- podman ---------------------------------------------------------------------------------


def test_podman_run_of_a_queued_job_runs_once_granted(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    held = queue.held_job()
    started = time.monotonic()
    script = "echo out; echo err >&2; exit 3"
    command = scrun_podman(
        "run", "--name", "queued-run", "-e", f"SCRUN_DEPENDENCY=afterok:{held}", IMAGE,
        "sh", "-c", script,
    )  # fmt: skip
    try:
        with running(command, quick_site.env) as run:
            container = podman_id(quick_site, "queued-run")
            job = queue.container_job(container[:12])
            # created and started while its job waits: podman lists it as running at once
            wait_for("Up", lambda: podman_status(quick_site, "queued-run").startswith("Up"), 30)
            assert time.monotonic() - started < 30
            assert queue.state(job) == ("PENDING", "Dependency")
            wait_for(
                "scrun state to show the job's reason",
                lambda: scrun_state(quick_site, container).get("jobReason") == "Dependency",
                20,
            )
            state = scrun_state(quick_site, container)
            assert (state["status"], state["jobId"], state["jobState"]) == (
                "running",
                job,
                "PENDING",
            )
            listed = quick_site.scrun("list", timeout=30).stdout
            assert any(
                line.startswith(container) and "(Dependency)" in line
                for line in listed.splitlines()
            ), listed
            run.wait_for_stderr(f"scrun: job {job} pending (Dependency)", 30)
            queue.release(held)
            out, err = run.communicate(timeout=120)
    finally:
        quick_site.podman("rm", "-f", "queued-run")
    assert run.returncode == 3, err
    assert out == "out\n"
    lines = [line for line in err.splitlines() if line.startswith("scrun:")]
    assert lines[0] == f"scrun: job {job} pending (Dependency)", err
    assert lines[-1].startswith(f"scrun: job {job} running on n"), err
    assert "err" in err.splitlines()


def podman_status(site: SiteRuntime, name: str) -> str:
    done = site.podman("ps", "--filter", f"name={name}", "--format", "{{.Status}}")
    return done.stdout.strip()


def queued_run(
    site: SiteRuntime, queue: Queue, name: str, *args: str
) -> tuple[AbstractContextManager[Background], int]:
    """`podman run --rm --name NAME ARGS` in the background, its job made to wait on a held
    job; returns the run (a context manager) and the held job."""
    held = queue.held_job()
    command = scrun_podman(
        "run", "--rm", "--name", name, "-e", f"SCRUN_DEPENDENCY=afterok:{held}", *args
    )
    return running(command, site.env), held


def test_notices_can_be_silenced_per_container(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    context, held = queued_run(
        quick_site, queue, "quiet-run", "-e", "SCRUN_PENDING_NOTICES=0", IMAGE, "echo", "done"
    )
    with context as run:
        job = queue.container_job(podman_id(quick_site, "quiet-run")[:12])
        wait_for(f"job {job} to pend", lambda: queue.state(job)[0] == "PENDING", 30)
        # No event tells that a notice was not given: past pending_notice (1 s) and a
        # reading of the queue, none has come.
        time.sleep(3)
        queue.release(held)
        out, err = run.communicate(timeout=120)
    assert (run.returncode, out) == (0, "done\n"), err
    assert "scrun:" not in err


@pytest.mark.parametrize(
    "action",
    [("stop", "-t", "2"), ("kill",), ("rm", "-f")],
    ids=["stop", "kill", "rm -f"],
)
def test_a_queued_container_can_be_stopped(
    quick_site: SiteRuntime,
    queue: Queue,
    action: tuple[str, ...],
    no_leftovers: Callable[..., None],
) -> None:
    """Its job is withdrawn at once; nothing is left."""
    held = queue.held_job()
    done = quick_site.podman(
        "run", "-d", "--name", "queued-stop", "-e", f"SCRUN_DEPENDENCY=afterok:{held}",
        IMAGE, "sleep", "600",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    container = done.stdout.strip()
    job = queue.container_job(container[:12])
    assert queue.state(job)[0] == "PENDING"
    started = time.monotonic()
    acted = quick_site.podman(*action, "queued-stop")
    assert acted.returncode == 0, acted.stderr
    wait_for(f"job {job} to leave the queue", lambda: queue.state(job) == ("", ""), 15)
    assert time.monotonic() - started < 15
    if action[0] != "rm":
        status = quick_site.podman("inspect", "--format", "{{.State.ExitCode}}", "queued-stop")
        assert status.stdout.strip() in ("137", "143"), status
        quick_site.podman("rm", "queued-stop")


def test_a_queued_job_slurm_cancels_ends_the_container(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    context, _ = queued_run(quick_site, queue, "queued-cancel", IMAGE, "echo", "never")
    with context as run:
        job = queue.container_job(podman_id(quick_site, "queued-cancel")[:12])
        queue.cancel(job)  # the user's scancel, or a time limit in the queue
        out, err = run.communicate(timeout=60)
    assert run.returncode not in (0, None) and out == ""
    # The cancel may reach the job before podman calls start (start fails with the
    # error) or after (the container's stderr gets it): the same line either way.
    assert re.search(rf"scrun: (error: )?job {job} ended before it started", err), err


def test_a_queued_job_whose_salloc_is_killed_is_cancelled(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    """salloc killed (the OOM killer, an admin) while its job waits: Slurm would keep the
    job queued, to be granted with no one to hold it. The container ends, and its job."""
    context, _ = queued_run(quick_site, queue, "queued-salloc", IMAGE, "echo", "never")
    with context as run:
        job = queue.container_job(podman_id(quick_site, "queued-salloc")[:12])
        anchor = quick_site.podman("inspect", "--format", "{{.State.Pid}}", "queued-salloc")
        os.kill(salloc_of(anchor.stdout.strip()), signal.SIGKILL)
        out, err = run.communicate(timeout=60)
    assert run.returncode not in (0, None) and out == ""
    assert f"job {job} cancelled: its salloc was killed (signal 9)" in err, err


def test_a_blocker_job_makes_it_wait_for_resources(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    blocker = queue.blocker()
    command = scrun_podman("run", "--rm", "--name", "queued-blocked", IMAGE, "echo", "ran")
    with running(command, quick_site.env) as run:
        job = queue.container_job(podman_id(quick_site, "queued-blocked")[:12])
        wait_for(f"job {job} to pend", lambda: queue.state(job)[0] == "PENDING", 30)
        run.wait_for_stderr(f"scrun: job {job} pending (", 30)
        queue.cancel(blocker)
        out, err = run.communicate(timeout=120)
    assert (run.returncode, out) == (0, "ran\n"), err
    assert f"scrun: job {job} pending (" in err, err


def test_drained_nodes_make_it_wait(
    cluster: Cluster, quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    def nodes(state: str, *reason: str) -> None:
        done = cluster.run(
            ["scontrol", "update", "NodeName=n[1-2]", f"State={state}", *reason], timeout=30
        )
        assert done.returncode == 0, done.stderr

    nodes("DRAIN", "Reason=scrun-test")
    try:
        done = quick_site.podman("run", "-d", "--name", "queued-drained", IMAGE, "true")
        assert done.returncode == 0, done.stderr
        job = queue.container_job(done.stdout.strip()[:12])
        wait_for(f"job {job} to pend", lambda: queue.state(job)[0] == "PENDING", 30)
        wait_for(
            "scrun state to show why the job waits",
            lambda: bool(scrun_state(quick_site, done.stdout.strip()).get("jobReason")),
            20,
        )
        removed = quick_site.podman("rm", "-f", "queued-drained")
        assert removed.returncode == 0, removed.stderr
        wait_for(f"job {job} to leave the queue", lambda: queue.state(job) == ("", ""), 15)
    finally:
        nodes("RESUME")


# -- stage-in after create ----------------------------------------------------------------


def slow_stage_in(cluster: Cluster, seconds: int, fail: bool = False) -> str:
    """The cluster's staging scrun.lua with a stage-in that first sleeps (and may fail)."""
    lua = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()
    hook = "function slurm_scrun_stage_in("
    assert lua.count(hook) == 1
    renamed = lua.replace(hook, "function cluster_stage_in(")
    body, returned, _ = renamed.rpartition("return slurm.SUCCESS")
    assert returned
    ending = (
        'slurm.log_error("no room on the scratch filesystem"); return slurm.ERROR'
        if fail
        else "return cluster_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, "
        "group_id, job_env)"
    )
    return body + (
        "function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,"
        " group_id, job_env)\n"
        f'  slurm.allocator_command("sleep {seconds}")\n  {ending}\nend\n'
        "return slurm.SUCCESS\n"
    )


def test_a_stage_in_longer_than_create_wait_goes_on_after_create(
    cluster: Cluster,
    site_runtime: Callable[..., SiteRuntime],
    no_leftovers: Callable[..., None],
) -> None:
    site = site_runtime(slow_stage_in(cluster, 4), settings={"create_wait": 1})
    started = time.monotonic()
    done = site.podman("run", "-d", "--name", "slow-stage", IMAGE, "echo", "staged")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 4  # create did not wait for stage-in
    try:
        waited = site.podman("wait", "slow-stage", timeout=60)
        assert waited.stdout.strip() == "0", waited
        assert site.podman("logs", "slow-stage").stdout == "staged\n"
    finally:
        site.podman("rm", "-f", "slow-stage")


def test_a_stage_in_failing_after_create_ends_the_container(
    cluster: Cluster,
    site_runtime: Callable[..., SiteRuntime],
    no_leftovers: Callable[..., None],
) -> None:
    site = site_runtime(slow_stage_in(cluster, 3, fail=True), settings={"create_wait": 1})
    done = site.podman("run", "--rm", IMAGE, "echo", "never", timeout=90)
    assert done.returncode not in (0, None) and done.stdout == ""
    # start fails with the line itself should stage-in have failed before podman calls it
    assert re.search(r"scrun: (error: )?stage-in failed", done.stderr), done
    assert "no room" in done.stderr, done


# -- docker ---------------------------------------------------------------------------------


def test_docker_run_of_a_queued_job(
    docker: Docker, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    """Docker under the cluster's own site config: the default notice delay (5 s)."""
    held = queue.held_job()
    command = docker.command(
        "run", "--rm", "--runtime", "scrun", "--network", "none", "--name", "queued-docker",
        "-e", f"SCRUN_DEPENDENCY=afterok:{held}", IMAGE, "sh", "-c", "echo out; exit 4",
    )  # fmt: skip
    with running(command, docker.env) as run:
        wait_for(
            "docker to list the container",
            lambda: docker("ps", "--filter", "name=queued-docker", "-q").stdout.strip() != "",
            60,
        )
        container = docker("inspect", "--format", "{{.Id}}", "queued-docker").stdout.strip()
        job = queue.container_job(container[:12])
        assert queue.state(job)[0] == "PENDING"
        run.wait_for_stderr(f"scrun: job {job} pending (Dependency)", 30)  # after 5 s
        queue.release(held)
        out, err = run.communicate(timeout=120)
    assert (run.returncode, out) == (4, "out\n"), err
    assert f"scrun: job {job} pending (Dependency)" in err, err


def test_docker_stop_of_a_queued_container(
    docker: Docker, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    held = queue.held_job()
    done = docker(
        "run", "-d", "--runtime", "scrun", "--network", "none", "--name", "queued-docker-stop",
        "-e", f"SCRUN_DEPENDENCY=afterok:{held}", IMAGE, "sleep", "600",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = queue.container_job(done.stdout.strip()[:12])
    assert queue.state(job)[0] == "PENDING"
    try:
        assert docker("stop", "-t", "2", "queued-docker-stop").returncode == 0
        wait_for(f"job {job} to leave the queue", lambda: queue.state(job) == ("", ""), 15)
    finally:
        docker("rm", "-f", "queued-docker-stop")


# -- longer than podman's 240 s for create ----------------------------------------------------


def test_a_wait_longer_than_podmans_create_timeout(
    cluster: Cluster,
    podman: Podman,
    site_runtime: Callable[..., SiteRuntime],
    queue: Queue,
    no_leftovers: Callable[..., None],
) -> None:
    """Podman gives `create` 240 s (libpod's ContainerCreateTimeout). One container waits
    250 s in the queue (a dependency on a job that runs that long), another has a 250 s
    stage-in; both run, at the same time."""
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    if int(version.split(".")[0]) < 5:
        pytest.skip(f"podman {version}: the long wait runs on the podman 5 platforms")
    before = queue.running_job(250)
    waiting = scrun_podman(
        "run", "--rm", "-e", f"SCRUN_DEPENDENCY=afterany:{before}", IMAGE, "echo", "waited"
    )
    site = site_runtime(slow_stage_in(cluster, 250))
    staging = scrun_podman("run", "--rm", IMAGE, "echo", "staged")
    with running(waiting, cluster.env) as pending, running(staging, site.env) as staged:
        out, err = pending.communicate(timeout=420)
        assert (pending.returncode, out) == (0, "waited\n"), err
        out, err = staged.communicate(timeout=120)
        assert (staged.returncode, out) == (0, "staged\n"), err


def test_a_queued_container_cannot_be_paused_yet(
    quick_site: SiteRuntime, queue: Queue, no_leftovers: Callable[..., None]
) -> None:
    held = queue.held_job()
    done = quick_site.podman(
        "run", "-d", "--name", "queued-pause", "-e", f"SCRUN_DEPENDENCY=afterok:{held}",
        IMAGE, "true",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        job = queue.container_job(done.stdout.strip()[:12])
        paused = quick_site.scrun("pause", done.stdout.strip(), timeout=30)
        assert paused.returncode != 0
        assert paused.stderr.strip().endswith(
            f"has no process to pause yet: job {job} waits in the queue"
        ), paused.stderr
    finally:
        quick_site.podman("rm", "-f", "queued-pause")
