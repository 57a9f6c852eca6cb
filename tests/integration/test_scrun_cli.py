"""scrun driven by hand (as conmon or containerd-shim would), against the real cluster.

Every test uses its own `--root` (a tmp dir) and checks that it ends up empty, besides the
usual `no_leftovers` (which looks only at the default root)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import type_into_terminal, wait_for
from scrunlib.slurm_commands import job_tag

if TYPE_CHECKING:
    from conftest import Cluster

SCRUN = str(Path(sys.prefix) / "bin" / "scrun")
STOP_TIMEOUT = 30.0  # Slurm's KillWait (5 s here) plus margin
KILL_WITHIN = 3.0  # seconds from `kill ID 9` to `stopped`


# ----------------------------------------------------------------------------- helpers


def process_state(pid: int) -> str | None:
    """The kernel's state letter of `pid`, None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


def process_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may linger: PID 1 here reaps lazily)."""
    return process_state(pid) not in (None, "Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def sruns_of_job(job_id: int) -> list[str]:
    """Live srun processes working for `job_id` (`srun --jobid N ...`)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        argv = cmdline(int(proc.name))
        if not argv or os.path.basename(argv[0]) != "srun":
            continue
        ours = f"--jobid={job_id}" in argv or ("--jobid", str(job_id)) in pairwise(argv)
        if ours and process_running(int(proc.name)):
            found.append(f"{proc.name}: {' '.join(argv)}")
    return found


def job_in_squeue(cluster: Cluster, job_id: int) -> bool:
    done = cluster.run(["squeue", "-h", "-o", "%i"], timeout=30)
    assert done.returncode == 0, done.stderr
    return str(job_id) in done.stdout.split()


def wait_job_gone(cluster: Cluster, job_id: int, timeout: float = 15.0) -> None:
    wait_for(
        f"job {job_id} gone from squeue",
        lambda: not job_in_squeue(cluster, job_id),
        timeout,
        lambda: cluster.run(["squeue", "-j", str(job_id)]).stdout,
    )


def make_bundle(cluster: Cluster, directory: Path, args: list[str]) -> Path:
    """A bundle that runs `args`: the cluster's config.json with other process.args, and
    a `rootfs` link to the cluster bundle's rootfs."""
    directory.mkdir()
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["process"]["args"] = args
    config["process"]["terminal"] = False
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "rootfs").symlink_to(Path(cluster.bundle) / "rootfs")
    return directory


@dataclass
class Scrun:
    """scrun with `--root` in a tmp dir; remembers what it created, to clean up after a
    failed test."""

    cluster: Cluster
    tmp: Path
    root: Path
    ids: set[str] = field(default_factory=set)
    jobs: set[int] = field(default_factory=set)
    creates: int = 0

    def __call__(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Any scrun command; output captured (not for create: the anchor keeps its stdio)."""
        return self.cluster.run(
            [SCRUN, "--root", str(self.root), *args], timeout=timeout, stdin=subprocess.DEVNULL
        )

    def create(
        self,
        container_id: str,
        bundle: Path | str,
        pid_file: Path | None = None,
        options: tuple[str, ...] = (),
    ) -> subprocess.CompletedProcess[str]:
        """`scrun create`, its stdio in files: the anchor inherits them (they are the
        container's), so pipes would not reach EOF before the container ends."""
        self.ids.add(container_id)
        self.creates += 1
        io = self.tmp / "io"  # not named after the id: ids may be hostile (`../x`)
        io.mkdir(exist_ok=True)
        stdout, stderr = io / f"create-{self.creates}.out", io / f"create-{self.creates}.err"
        argv = [SCRUN, "--root", str(self.root), "create", "--bundle", str(bundle)]
        if pid_file is not None:
            argv += ["--pid-file", str(pid_file)]
        argv += options
        with stdout.open("w") as out, stderr.open("w") as err:
            done = subprocess.run(
                [*argv, container_id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self.cluster.env,
                timeout=120,
                check=False,
            )
        return subprocess.CompletedProcess(
            done.args, done.returncode, stdout.read_text(), stderr.read_text()
        )

    def state(self, container_id: str) -> dict[str, Any]:
        done = self("state", container_id)
        assert done.returncode == 0, done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        if isinstance(document.get("jobId"), int):
            self.jobs.add(document["jobId"])
        return document

    def wait_status(self, container_id: str, status: str, timeout: float) -> dict[str, Any]:
        states: list[dict[str, Any]] = []

        def probe() -> bool:
            states.append(self.state(container_id))
            return states[-1]["status"] == status

        wait_for(f"status {status}", probe, timeout, lambda: json.dumps(states[-1]))
        return states[-1]

    def entries(self) -> list[str]:
        """What is left under --root: container state (the per-user caches, dot files, aside)."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if not p.name.startswith("."))

    def assert_root_empty(self) -> None:
        assert self.entries() == [], f"left in --root {self.root}: {self.entries()}"

    def cleanup(self) -> None:
        for container_id in self.ids:
            self("delete", "--force", container_id)
        for job_id in self.jobs:
            self.cluster.run(["scancel", str(job_id)])


@pytest.fixture
def scrun(cluster: Cluster, tmp_path: Path, no_leftovers: Callable[..., None]) -> Iterator[Scrun]:
    """Runs before no_leftovers' check at teardown: cleans up only what a failed test left
    (and the test fails anyway, on its own assertions)."""
    helper = Scrun(cluster=cluster, tmp=tmp_path, root=tmp_path / "root")
    yield helper
    helper.cleanup()


# ----------------------------------------------------------------------------- lifecycle


def test_create_start_kill_delete(cluster: Cluster, scrun: Scrun) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sleep", "30"])
    pid_file = scrun.tmp / "anchor.pid"

    created = scrun.create("life", bundle, pid_file)
    assert created.returncode == 0, created.stderr
    assert scrun.entries() == ["life"]  # the state is under our --root
    pid_text = pid_file.read_text()
    assert re.fullmatch(r"[0-9]+", pid_text), repr(pid_text)  # decimal, no newline
    anchor = int(pid_text)
    state = scrun.state("life")
    assert state["status"] == "created"
    assert state["pid"] == anchor
    assert state["id"] == "life"
    assert isinstance(state.get("jobId"), int), state
    job_id = state["jobId"]
    assert process_running(anchor)
    assert "create" in cmdline(anchor)  # the anchor is `scrun create`'s forked child
    assert job_in_squeue(cluster, job_id)

    started = scrun("start", "life")
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    state = scrun.state("life")
    assert state["status"] == "running"
    assert state["pid"] == anchor

    began = time.monotonic()
    killed = scrun("kill", "life", "9")
    assert killed.returncode == 0, killed.stderr
    state = scrun.wait_status("life", "stopped", STOP_TIMEOUT)
    took = time.monotonic() - began
    assert state["exitCode"] == 137
    assert state["jobId"] == job_id
    assert state["pid"] == 0
    wait_for("the anchor's exit", lambda: not process_running(anchor), 10, lambda: str(anchor))
    phases = json.loads((scrun.root / "life" / "state.json").read_text())["phases"]
    timed = [name for name in phases if name != "stage-out"]  # stage-out: only with scrun.lua
    assert timed == ["parse", "allocate", "stage-in", "launch", "run", "teardown"], phases
    assert all(0 <= seconds < 60 for seconds in phases.values()), phases

    deleted = scrun("delete", "life")
    assert deleted.returncode == 0, deleted.stderr
    gone = scrun("state", "life")
    assert gone.returncode == 1
    assert "does not exist" in gone.stderr
    assert gone.stdout == ""
    wait_job_gone(cluster, job_id)
    scrun.assert_root_empty()
    assert pid_file.read_text() == pid_text  # the pid file is the caller's: never removed
    # last, so that the rest of the flow is checked even when this fails: SIGKILL is
    # immediate, not Slurm's KillWait grace (podman gives up ~5 s after its SIGKILL)
    assert took < KILL_WITHIN, f"kill 9 took {took:.1f}s to stop the container"


def test_run_exits_with_the_containers_code(cluster: Cluster, scrun: Scrun) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sh", "-c", "echo $SLURM_JOB_ID; exit 5"])
    scrun.ids.add("runner")
    done = scrun("run", "--bundle", str(bundle), "runner", timeout=120)
    assert done.returncode == 5, done.stderr
    assert re.fullmatch(r"[0-9]+\n", done.stdout), repr(done.stdout)
    job_id = int(done.stdout)
    scrun.jobs.add(job_id)
    scrun.assert_root_empty()
    wait_job_gone(cluster, job_id)


def test_run_with_crun_config_and_runc_options(cluster: Cluster, scrun: Scrun) -> None:
    """--config runs another file than config.json; the options without a meaning
    through Slurm are accepted."""
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sh", "-c", "echo config.json"])
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["args"] = ["sh", "-c", "echo alternative; exit 4"]
    (bundle / "alt.json").write_text(json.dumps(config))
    pid_file = scrun.tmp / "run.pid"
    scrun.ids.add("alt")
    done = scrun(
        "run", "--bundle", str(bundle), "--config", "alt.json", "--pid-file", str(pid_file),
        "--no-subreaper", "--no-pivot", "--no-new-keyring", "--preserve-fds", "0", "alt",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (4, "alternative\n"), done.stderr
    assert pid_file.read_text().isdigit()
    scrun.assert_root_empty()


def test_run_detached_returns_while_the_container_runs(cluster: Cluster, scrun: Scrun) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sh", "-c", "echo up; sleep 60"])
    pid_file = scrun.tmp / "detached.pid"
    out, err = scrun.tmp / "detached.out", scrun.tmp / "detached.err"
    scrun.ids.add("detached")
    began = time.monotonic()
    argv = [SCRUN, "--root", str(scrun.root), "run", "-d", "--bundle", str(bundle)]
    # files, not pipes: they are the container's stdout and stderr, open while it runs
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run(
            [*argv, "--pid-file", str(pid_file), "detached"],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=cluster.env,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, err.read_text()
    assert time.monotonic() - began < 30
    state = scrun.state("detached")
    assert state["status"] == "running" and state["pid"] == int(pid_file.read_text())
    wait_for("the container's output", lambda: out.read_text() == "up\n", 20, out.read_text)
    assert scrun("delete", "detached").returncode == 0
    wait_job_gone(cluster, state["jobId"])
    scrun.assert_root_empty()


def test_create_with_crun_config(cluster: Cluster, scrun: Scrun) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["true"])
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["args"] = ["sh", "-c", "exit 6"]
    alternative = scrun.tmp / "elsewhere.json"
    alternative.write_text(json.dumps(config))
    done = scrun.create("created-alt", bundle, options=("--config", str(alternative)))
    assert done.returncode == 0, done.stderr
    assert scrun("start", "created-alt").returncode == 0
    assert scrun.wait_status("created-alt", "stopped", STOP_TIMEOUT)["exitCode"] == 6
    assert scrun("delete", "created-alt").returncode == 0
    scrun.assert_root_empty()


def test_run_in_the_foreground_gives_the_container_the_callers_terminal(
    cluster: Cluster, scrun: Scrun
) -> None:
    """process.terminal and no --console-socket: as with crun, the container's stdio is a
    terminal (slurmstepd's pty for srun --pty, fed from ours); typed input reaches it."""
    bundle = make_bundle(
        cluster, scrun.tmp / "bundle", ["sh", "-c", "tty; read line; echo got $line; exit 7"]
    )
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["terminal"] = True
    (bundle / "config.json").write_text(json.dumps(config))
    scrun.ids.add("tty")
    argv = [SCRUN, "--root", str(scrun.root), "run", "--bundle", str(bundle), "tty"]
    code, text = type_into_terminal(argv, cluster.env, b"hello\r")
    assert code == 7, text
    assert re.search(r"^/dev/pts/[0-9]+\r$", text, re.MULTILINE), text
    assert "got hello" in text, text
    scrun.assert_root_empty()


# ----------------------------------------------------------------------------- errors


def test_delete_force_of_unknown_id_succeeds(scrun: Scrun) -> None:
    done = scrun("delete", "--force", "unknown-id")
    assert done.returncode == 0, done.stderr
    scrun.assert_root_empty()


def test_state_of_unknown_id_fails(scrun: Scrun) -> None:
    done = scrun("state", "unknown")
    assert done.returncode == 1
    assert "does not exist" in done.stderr
    assert done.stdout == ""


def test_duplicate_id_is_refused_and_first_container_untouched(
    cluster: Cluster, scrun: Scrun
) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sleep", "30"])
    first_pid_file = scrun.tmp / "first.pid"
    second_pid_file = scrun.tmp / "second.pid"
    first = scrun.create("twice", bundle, first_pid_file)
    assert first.returncode == 0, first.stderr
    before = scrun.state("twice")
    assert before["status"] == "created"

    second = scrun.create("twice", bundle, second_pid_file)
    assert second.returncode != 0
    assert "already exists" in second.stderr
    assert not second_pid_file.exists()
    after = scrun.state("twice")
    assert after == before
    assert scrun.entries() == ["twice"]
    assert first_pid_file.read_text() == str(before["pid"])
    assert process_running(before["pid"])
    assert job_in_squeue(cluster, before["jobId"])

    deleted = scrun("delete", "twice")
    assert deleted.returncode == 0, deleted.stderr
    wait_job_gone(cluster, before["jobId"])
    scrun.assert_root_empty()


def test_create_with_missing_bundle_fails_cleanly(scrun: Scrun) -> None:
    pid_file = scrun.tmp / "pid"
    done = scrun.create("nobundle", "/nonexistent", pid_file)
    assert done.returncode != 0
    message = done.stderr.strip()
    assert message, "no error message"
    assert "\n" not in message, f"not one line: {done.stderr!r}"
    assert "/nonexistent" in message
    assert not pid_file.exists()
    scrun.assert_root_empty()
    assert scrun("state", "nobundle").returncode == 1


@pytest.mark.parametrize("bad_id", ["../x", "a/b", ".x", "x\ny", ""])
def test_bad_container_id_is_refused(cluster: Cluster, scrun: Scrun, bad_id: str) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["true"])
    (scrun.tmp / "io").mkdir()

    def beside_root() -> list[str]:
        return sorted(p.name for p in scrun.tmp.iterdir() if p.name not in ("root", "io"))

    before = beside_root()
    done = scrun.create(bad_id, bundle, scrun.tmp / "pid")
    assert done.returncode != 0
    assert "container id" in done.stderr, done.stderr
    assert not (scrun.tmp / "pid").exists()
    # nothing made, in --root or (for ../x) beside it
    assert beside_root() == before
    scrun.assert_root_empty()
    state = scrun("state", bad_id)
    assert state.returncode != 0
    assert "container id" in state.stderr, state.stderr


# ----------------------------------------------------------------------------- teardown


def start_sleeper(cluster: Cluster, scrun: Scrun, container_id: str) -> dict[str, Any]:
    """Create and start a `sleep 300` container; its state once running."""
    bundle = make_bundle(cluster, scrun.tmp / f"bundle-{container_id}", ["sleep", "300"])
    created = scrun.create(container_id, bundle, scrun.tmp / f"{container_id}.pid")
    assert created.returncode == 0, created.stderr
    assert container_id in scrun.entries()  # the state is under our --root
    started = scrun("start", container_id)
    assert started.returncode == 0, started.stderr
    state = scrun.wait_status(container_id, "running", 10)
    assert isinstance(state.get("jobId"), int), state
    return state


def test_delete_of_a_running_container(cluster: Cluster, scrun: Scrun) -> None:
    state = start_sleeper(cluster, scrun, "busy")
    anchor, job_id = state["pid"], state["jobId"]
    assert process_running(anchor)
    wait_for("the step's srun", lambda: bool(sruns_of_job(job_id)), 10, lambda: "none")

    deleted = scrun("delete", "busy", timeout=120)
    assert deleted.returncode == 0, deleted.stderr
    assert not process_running(anchor), "delete returned while the anchor still runs"
    scrun.assert_root_empty()
    wait_job_gone(cluster, job_id)
    wait_for(
        "no srun of the job",
        lambda: not sruns_of_job(job_id),
        10,
        lambda: "; ".join(sruns_of_job(job_id)),
    )


def test_delete_regex_ends_every_container_it_matches(cluster: Cluster, scrun: Scrun) -> None:
    """crun's `delete --force --regex` (its test_multiple_containers_delete): the running
    containers whose ids match are stopped, their jobs ended, their state removed; the
    others run on."""
    states = {name: start_sleeper(cluster, scrun, name) for name in ("test-a", "test-b", "kept")}

    deleted = scrun("delete", "--force", "--regex", "test-*", timeout=120)
    assert deleted.returncode == 0, deleted.stderr
    assert scrun.entries() == ["kept"]
    for name in ("test-a", "test-b"):
        assert not process_running(states[name]["pid"]), name
        wait_job_gone(cluster, states[name]["jobId"])
    assert scrun.state("kept")["status"] == "running"
    assert job_in_squeue(cluster, states["kept"]["jobId"])


def test_delete_after_the_anchor_was_killed(cluster: Cluster, scrun: Scrun) -> None:
    state = start_sleeper(cluster, scrun, "orphan")
    anchor, job_id = state["pid"], state["jobId"]
    wait_for("the step's srun", lambda: bool(sruns_of_job(job_id)), 10, lambda: "none")

    os.kill(anchor, signal.SIGKILL)
    wait_for("the anchor's death", lambda: not process_running(anchor), 10, lambda: str(anchor))
    state = scrun.state("orphan")
    assert state["status"] == "stopped"
    assert state["pid"] == 0
    assert state["jobId"] == job_id

    deleted = scrun("delete", "orphan", timeout=120)
    assert deleted.returncode == 0, deleted.stderr
    scrun.assert_root_empty()
    wait_job_gone(cluster, job_id)
    wait_for(
        "no srun of the job",
        lambda: not sruns_of_job(job_id),
        10,
        lambda: "; ".join(sruns_of_job(job_id)),
    )


FREEZER = Path("/sys/fs/cgroup/freezer")
DELETE_TIMEOUT = 5.0  # the site's delete_timeout: the default (the cluster's scrun.toml has none)


def freeze(cgroup: Path, pid: int, state: str = "FROZEN") -> None:
    """Move `pid` into a v1 freezer cgroup and freeze (or thaw) it, as crun's test_delete
    freezes a container: the process then ignores every signal, SIGKILL too, until thawed."""
    cgroup.mkdir(exist_ok=True)
    if state == "FROZEN":
        (cgroup / "cgroup.procs").write_text(str(pid))
    (cgroup / "freezer.state").write_text(state)
    wait_for(
        f"freezer {state}", lambda: (cgroup / "freezer.state").read_text().strip() == state, 10
    )


@pytest.mark.skipif(not FREEZER.is_dir(), reason="needs a cgroup v1 freezer")
def test_delete_of_a_frozen_anchor_returns_and_ends_its_job(
    cluster: Cluster, scrun: Scrun, tmp_path: Path
) -> None:
    """delete --force returns within delete_timeout (and a little for scancel) although the
    anchor cannot die, cancels its job, keeps the state and succeeds, as crun's does for a
    frozen container; a delete once it has been thawed (and so died of the SIGKILL)
    finishes. kill is bounded the same way."""
    state = start_sleeper(cluster, scrun, "frozen")
    anchor, job_id = state["pid"], state["jobId"]
    wait_for("the step's srun", lambda: bool(sruns_of_job(job_id)), 10, lambda: "none")
    cgroup = FREEZER / f"scrun-test-{os.getpid()}-{tmp_path.name}"
    freeze(cgroup, anchor)
    try:
        assert process_state(anchor) == "D"
        started = time.monotonic()
        killed = scrun("kill", "frozen", "USR1", timeout=60)
        assert time.monotonic() - started < DELETE_TIMEOUT + 5, killed.stderr
        assert killed.returncode == 0, killed.stderr
        assert f"signal 10 sent with scancel to {job_id}." in killed.stderr

        started = time.monotonic()
        deleted = scrun("delete", "--force", "frozen", timeout=120)
        took = time.monotonic() - started
        assert took < DELETE_TIMEOUT + 5, f"{took:.1f} s: {deleted.stderr}"
        assert deleted.returncode == 0, deleted.stderr
        assert len(deleted.stderr.splitlines()) == 1, deleted.stderr
        assert f"anchor {anchor} cannot be stopped (process state D" in deleted.stderr
        assert "Device or resource busy" in deleted.stderr  # what crun's test_delete accepts
        assert f"ended job {job_id}" in deleted.stderr
        wait_job_gone(cluster, job_id)
        assert scrun.entries() == ["frozen"]  # kept for the delete that finishes
    finally:
        freeze(cgroup, anchor, "THAWED")
        wait_for("the anchor's death", lambda: not process_running(anchor), 10, str)
        cgroup.rmdir()
    deleted = scrun("delete", "frozen", timeout=60)
    assert deleted.returncode == 0, deleted.stderr
    scrun.assert_root_empty()


def test_job_cancelled_from_outside_ends_the_container(cluster: Cluster, scrun: Scrun) -> None:
    state = start_sleeper(cluster, scrun, "outside")
    anchor, job_id = state["pid"], state["jobId"]
    wait_for("the step's srun", lambda: bool(sruns_of_job(job_id)), 10, lambda: "none")

    assert cluster.run(["scancel", str(job_id)]).returncode == 0
    stopped = scrun.wait_status("outside", "stopped", STOP_TIMEOUT)
    assert stopped["exitCode"] != 0, stopped  # the container did not finish on its own
    wait_for("the anchor's exit", lambda: not process_running(anchor), 10, lambda: str(anchor))
    assert "CANCELLED" in (scrun.root / "outside" / "anchor.log").read_text()

    assert scrun("delete", "outside").returncode == 0
    scrun.assert_root_empty()
    wait_job_gone(cluster, job_id)


def test_sigint_to_the_anchor_ends_job_and_container(cluster: Cluster, scrun: Scrun) -> None:
    state = start_sleeper(cluster, scrun, "interrupted")
    anchor, job_id = state["pid"], state["jobId"]

    os.kill(anchor, signal.SIGINT)
    wait_for("the anchor's exit", lambda: not process_running(anchor), STOP_TIMEOUT, str)
    stopped = scrun.state("interrupted")
    assert stopped["status"] == "stopped" and stopped["exitCode"] == 137, stopped
    wait_job_gone(cluster, job_id)
    assert not sruns_of_job(job_id)
    assert scrun("delete", "interrupted").returncode == 0
    scrun.assert_root_empty()


def test_create_returns_while_the_job_is_queued_and_delete_withdraws_it(
    cluster: Cluster, scrun: Scrun
) -> None:
    """The job waits for another job (a dependency): create returns at once, the state
    says why it waits, delete withdraws the job, leaving nothing."""
    blocker = cluster.run(["salloc", "--no-shell", "-J", "scrun-blocker"])
    blocker_id = int(re.findall(r"allocation (\d+)", blocker.stderr)[0])
    try:
        bundle = make_bundle(cluster, scrun.tmp / "bundle-pending", ["true"])
        (scrun.tmp / "io").mkdir(exist_ok=True)
        with (scrun.tmp / "io" / "pending.err").open("w") as err:  # the anchor keeps it
            created = subprocess.run(
                [SCRUN, "--root", str(scrun.root), "create", "--bundle", str(bundle), "pending"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=30,
                env={**cluster.env, "SCRUN_DEPENDENCY": f"afterany:{blocker_id}"},
            )  # fmt: skip
        assert created.returncode == 0, (scrun.tmp / "io" / "pending.err").read_text()
        state = json.loads(scrun("state", "pending").stdout)
        assert (state["status"], state["jobState"]) == ("created", "PENDING")
        queue = cluster.run(["squeue", "-h", "-o", "%i %T %k"]).stdout
        assert f"{state['jobId']} PENDING {job_tag('pending')}" in queue
        assert scrun("delete", "pending", timeout=60).returncode == 0
        scrun.assert_root_empty()
        queue = cluster.run(["squeue", "-h", "-o", "%k"]).stdout
        assert job_tag("pending") not in queue.split()
    finally:
        cluster.run(["scancel", str(blocker_id)])


# ----------------------------------------------------------------------------- version


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(cluster: Cluster, scrun: Scrun, argv: list[str]) -> None:
    from importlib.metadata import version

    done = scrun(*argv)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(version("scrun") in line and "scrun" in line for line in lines), done.stdout
    assert any(line.startswith("spec:") for line in lines), done.stdout
    # the cluster's own release (22.05.8 on Debian 12, 24.11.5 on Debian 13)
    slurm = cluster.run(["srun", "--version"]).stdout.split()[-1]
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", slurm), slurm
    assert f"slurm: {slurm}" in lines, done.stdout


# ----------------------------------------------------------------------------- list


def test_list_shows_each_container_with_its_job_and_nodes(cluster: Cluster, scrun: Scrun) -> None:
    bundle = make_bundle(cluster, scrun.tmp / "bundle", ["sleep", "30"])
    assert scrun.create("listed", bundle).returncode == 0
    job_id = scrun.state("listed")["jobId"]
    nodes = cluster.run(["squeue", "-h", "-j", str(job_id), "-o", "%N"]).stdout.strip()
    assert nodes

    quiet = scrun("list", "-q")
    assert quiet.stdout == "listed\n", quiet
    (entry,) = json.loads(scrun("list", "--format", "json").stdout)
    assert (entry["id"], entry["status"], entry["jobId"]) == ("listed", "created", job_id)
    # the bundle the nodes run: the cluster's scrun.lua staged it into the shared dir
    staged = scrun.state("listed")["bundle"]
    assert staged.startswith(cluster["SCRUN_SHARED_DIR"]), staged
    assert entry["nodes"] == nodes and entry["bundle"] == staged
    header, row = scrun("list").stdout.splitlines()
    assert header.split()[:5] == ["ID", "PID", "STATUS", "JOBID", "NODES"]
    assert row.split()[2:5] == ["created", str(job_id), nodes]

    assert scrun("delete", "listed").returncode == 0
    assert scrun("list", "-q").stdout == ""
    scrun.assert_root_empty()
