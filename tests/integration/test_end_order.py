"""The container's end, in order, on the real cluster: its tasks end, then stage-out copies
its files back, then it is `stopped`; and removing a container mid-way leaves nothing.

Each test stages with a shipped layout (docs/scrun-lua: the cluster's own shared scratch,
and the node-local one, whose copies are on the nodes' own disks), wrapped by hooks that
let the test look while stage-out runs: `findings`, a directory in the shared dir, gets
what they saw, read on the node (slurm.remote_command) where the container ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import REPO, node_roots, slurm_bin_dir, with_cluster_staging, with_staging
from helpers import copy_out, local_popen, scrun_podman, wait_for

if TYPE_CHECKING:
    from conftest import Cluster, SiteRuntime

IMAGE = "localhost/busybox"
MakeSite = Callable[..., "SiteRuntime"]

# stage-out, watched: `began` gets /count as the node shows it when stage-out begins; a
# second later (time for a task that still ran to write again) and once the test's `go`
# exists (60 s at most), `ended` gets it again; then the layout's stage-out copies back.
LOOKING_STAGE_OUT = """
local findings = %s
local function exists(path) local f = io.open(path) if f then f:close() end return f ~= nil end
local function on_node(path)
  local _, output = slurm.remote_command("cat '" .. path .. "' 2>/dev/null || echo '(none)'")
  return output
end
local function write(name, text)
  local f = assert(io.open(findings .. "/" .. name .. ".tmp", "w"))
  f:write(text)
  f:close()
  os.rename(findings .. "/" .. name .. ".tmp", findings .. "/" .. name)
end
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  return cluster_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                          job_env)
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                               config_file, job_id, user_id, group_id)
  write("began", on_node(root_path .. "/count"))
  os.execute("sleep 1")
  local waited = 0
  while not exists(findings .. "/go") and waited < 600 do
    os.execute("sleep 0.1")
    waited = waited + 1
  end
  write("ended", on_node(root_path .. "/count"))
  return cluster_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                           config_file, job_id, user_id, group_id)
end
return slurm.SUCCESS
"""

# Says it runs, then writes a counter to /count as fast as it can until it is killed: a
# container that writes until the last moment (each write whole: a rename).
WRITER = (
    "echo writing; i=0; while :; do i=$((i+1)); echo $i > /count.new; mv /count.new /count; done"
)


def node_local_staging(cluster: Cluster) -> str:
    """docs/scrun-lua/node-local.lua, carrying through the cluster's shared dir."""
    text = (REPO / "docs" / "scrun-lua" / "node-local.lua").read_text()
    line = 'local scratch = "/scratch"'
    assert text.count(line) == 1, f"node-local.lua: no {line!r}"
    return text.replace(line, f'local scratch = "{cluster["SCRUN_SHARED_DIR"]}"')


@pytest.fixture
def findings(cluster: Cluster) -> Iterator[Path]:
    path = Path(cluster["SCRUN_SHARED_DIR"]) / f"end-order-{uuid.uuid4().hex[:10]}"
    path.mkdir()
    path.chmod(0o777)
    yield path
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()


@pytest.fixture(params=["shared-scratch", "node-local"])
def looking_site(
    request: pytest.FixtureRequest, cluster: Cluster, site_runtime: MakeSite, findings: Path
) -> SiteRuntime:
    hooks = LOOKING_STAGE_OUT % json.dumps(str(findings))
    if request.param == "node-local":
        return site_runtime(with_staging(node_local_staging(cluster), hooks))
    return site_runtime(with_cluster_staging(cluster, hooks))


def writing(site: SiteRuntime, name: str) -> bool:
    return "writing" in site.podman("logs", name).stdout


def state_of(site: SiteRuntime, cid: str) -> dict[str, Any]:
    done = site.scrun("state", cid)
    assert done.returncode == 0, done.stderr
    state: dict[str, Any] = json.loads(done.stdout)
    return state


def login_processes() -> list[str]:
    """The command lines of this host's processes (the nodes' included: one pid space)."""
    done = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_state_says_running_until_stage_out_has_run(
    looking_site: SiteRuntime, findings: Path, no_leftovers: Callable[..., None]
) -> None:
    """podman 4.3 (its `state`), scripts and `scrun list` act on `stopped`: while the
    container's files are being copied back it is still running, with the anchor's pid
    (tests/unit/test_anchor.py sees `stopped` come after)."""
    name = f"scrun-end-{uuid.uuid4().hex[:10]}"
    started = looking_site.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", "exit 3")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    try:
        wait_for("stage-out to begin", lambda: (findings / "began").exists(), 60)
        during = state_of(looking_site, cid)
        assert (during["status"], "exitCode" in during) == ("running", False), during
        assert during["pid"] > 0 and os.path.exists(f"/proc/{during['pid']}"), during
        listed = json.loads(looking_site.scrun("list", "--format", "json").stdout)
        assert [entry["status"] for entry in listed if entry["id"] == cid] == ["running"]
        (findings / "go").touch()  # podman then removes its state: no `stopped` to see
        waited = looking_site.podman("wait", name, timeout=60)
        assert (waited.returncode, waited.stdout.strip()) == (0, "3"), waited.stderr
    finally:
        (findings / "go").touch()
        looking_site.podman("rm", "-f", name)


def test_stop_brings_back_the_last_write_of_a_container_that_writes_to_its_end(
    looking_site: SiteRuntime,
    findings: Path,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """`podman stop` of a container that writes until it is killed: its tasks have ended
    before stage-out begins (nothing writes while stage-out copies), and what comes back
    is its last write."""
    (findings / "go").touch()
    name = f"scrun-end-{uuid.uuid4().hex[:10]}"
    started = looking_site.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", WRITER)
    assert started.returncode == 0, started.stderr
    try:
        wait_for("the container to write", lambda: writing(looking_site, name), 60)
        stopped = looking_site.podman("stop", "-t", "1", name, timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        wait_for("stage-out to end", lambda: (findings / "ended").exists(), 60)
        began, ended = ((findings / which).read_text() for which in ("began", "ended"))
        assert began.strip().isdigit() and began == ended, (began, ended)
        copied = copy_out(looking_site.podman, name, "/count", str(tmp_path / "count"))
        assert copied.returncode == 0, copied.stderr
        assert (tmp_path / "count").read_text() == ended
    finally:
        looking_site.podman("rm", "-f", name)


def exited(site: SiteRuntime, name: str) -> bool:
    done = site.podman("inspect", "-f", "{{.State.Status}}", name)
    return done.stdout.strip() in ("exited", "stopped")


def test_delete_after_a_dead_anchor_stages_out_once_the_tasks_have_ended(
    looking_site: SiteRuntime,
    findings: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """The anchor is killed while its container writes: `scrun delete` (podman's cleanup,
    `podman rm`) kills the srun the anchor left, which does not end the tasks on the node;
    stage-out waits until Slurm has ended them, so /count stands still while it runs."""
    (findings / "go").touch()
    name = f"scrun-end-{uuid.uuid4().hex[:10]}"
    started = looking_site.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", WRITER)
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    try:
        wait_for("the container to write", lambda: writing(looking_site, name), 60)
        os.kill(state_of(looking_site, cid)["pid"], signal.SIGKILL)
        # podman 4.3's `rm -f` while conmon has yet to report the death would `kill` a
        # container scrun already sees stopped, and fail ("container state improper")
        wait_for("podman to see it exited", lambda: exited(looking_site, name), 30)
        removed = looking_site.podman("rm", "-f", "-t", "0", name, timeout=120)
        assert removed.returncode == 0, removed.stderr
        wait_for("stage-out to end", lambda: (findings / "ended").exists(), 60)
        began, ended = ((findings / which).read_text() for which in ("began", "ended"))
        assert began.strip().isdigit() and began == ended, (began, ended)
    finally:
        looking_site.podman("rm", "-f", name)


def unique_sleep() -> str:
    """A command of this test's own (a container's `sleep 300` on a node is in this host's
    process list too)."""
    return f"sleep 300.{uuid.uuid4().int % 10**6:06d}"


def stage_in_running(command: str) -> str:
    """Hooks whose stage-in runs `command` on the login host before the cluster's own."""
    return (
        "function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,"
        " group_id, job_env)\n"
        f'  slurm.allocator_command("{command}")\n'
        "  return cluster_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,"
        " group_id, job_env)\nend\n"
        "function slurm_scrun_stage_out(...) return cluster_stage_out(...) end\n"
        "return slurm.SUCCESS\n"
    )


def test_removal_during_stage_in_leaves_nothing(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """`podman rm -f` while stage-in still runs a command (past create_wait): the command
    is killed, stage-out runs, the job ends; no job, spool directory or anchor is left
    (no_leftovers), and the removal does not wait for the command. Its sleep is this test's
    own (a container's `sleep 300` on a node is in this host's process list too)."""
    command = unique_sleep()
    site = site_runtime(
        with_cluster_staging(cluster, stage_in_running(command)), settings={"create_wait": 1}
    )
    name = f"scrun-end-{uuid.uuid4().hex[:10]}"
    started = site.podman("run", "-d", "--name", name, IMAGE, "true")
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    wait_for("stage-in's command", lambda: command in login_processes(), 30)
    began = time.monotonic()
    removed = site.podman("rm", "-f", "-t", "0", name, timeout=120)
    assert removed.returncode == 0, removed.stderr
    assert time.monotonic() - began < 60, "the removal waited for stage-in's command"
    assert command not in login_processes()
    assert site.scrun("state", cid).returncode != 0  # its state is gone


def test_a_sigkill_during_stage_in_ends_the_container_before_its_long_stage_out(
    cluster: Cluster,
    site_runtime: MakeSite,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """podman waits 5 s for the anchor's exit after its SIGKILL, then fails its `rm -f`
    ("given PIDs did not die within timeout"). Killed before its step ran, the anchor
    exits at once and leaves the stage-out (here 8 s long) and the job's end to `scrun
    delete`, which podman runs next and does not bound: the removal succeeds, the
    stage-out has run, nothing is left."""
    command = unique_sleep()
    marker = tmp_path / "staged-out"
    hooks = stage_in_running(command).replace(
        "function slurm_scrun_stage_out(...) return cluster_stage_out(...) end\n",
        "function slurm_scrun_stage_out(...)\n"
        f'  slurm.allocator_command("sleep 8; touch {marker}")\n'
        "  return cluster_stage_out(...)\nend\n",
    )
    site = site_runtime(with_cluster_staging(cluster, hooks), settings={"create_wait": 1})
    name = f"scrun-end-{uuid.uuid4().hex[:10]}"
    started = site.podman("run", "-d", "--name", name, IMAGE, "true")
    assert started.returncode == 0, started.stderr
    wait_for("stage-in's command", lambda: command in login_processes(), 30)
    anchor = state_of(site, started.stdout.strip())["pid"]
    killed = site.podman("kill", "-s", "KILL", name)
    assert killed.returncode == 0, killed.stderr
    wait_for("the anchor's exit", lambda: not Path(f"/proc/{anchor}").exists(), 3)
    assert not marker.exists()  # left to delete
    removed = site.podman("rm", "-f", "-t", "0", name, timeout=120)
    assert removed.returncode == 0, removed.stderr
    assert marker.exists()


def process_args(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def scrun_create_above(command: str) -> int:
    """The `scrun create` process above the process running `command`: the outermost of
    its ancestors that run `scrun … create` (the anchor, its child, runs the same)."""
    (pid,) = (int(p.name) for p in Path("/proc").iterdir()
              if p.name.isdigit() and process_args(int(p.name)).strip() == command)  # fmt: skip
    create = 0
    while pid > 1:
        pid = parent_of(pid)
        if " create " in process_args(pid):
            create = pid
    assert create, f"no `scrun create` above {command!r}"
    return create


def test_a_create_killed_during_stage_in_fails_at_once_and_leaves_nothing(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """`scrun create` SIGKILLed after it has forked its anchor, while stage-in runs: podman
    is told its create failed and never ends the container, so the anchor undoes it all
    (stage-in's command killed, stage-out, the job ended, the spool removed) and podman's
    `run` fails at once; nothing is left (no_leftovers). Before, the anchor held the job
    and podman waited for ever."""
    command = unique_sleep()
    site = site_runtime(with_cluster_staging(cluster, stage_in_running(command)))
    running = local_popen(
        scrun_podman("run", "--rm", IMAGE, "true"),
        env=site.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for("stage-in's command", lambda: command in login_processes(), 30)
        os.kill(scrun_create_above(command), signal.SIGKILL)
        _, stderr = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
    assert running.returncode not in (0, None), stderr
    assert command not in login_processes()


def read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    """What `fd` gives until a line starts with `wanted`, its end, or `timeout` seconds."""
    seen, deadline = b"", time.monotonic() + timeout
    while not any(line.startswith(wanted) for line in seen.splitlines()):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        seen += chunk
    return seen


# squeue as the anchor sees it while slurmctld is down, until the file beside it exists
UNANSWERING_SQUEUE = """#!/bin/sh
[ -e "$0.answers" ] && exec %s "$@"
echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2
exit 1
"""


def unanswering_slurm(cluster: Cluster, bin_dir: Path) -> Path:
    """`bin_dir` with the cluster's Slurm commands, but an UNANSWERING_SQUEUE."""
    bin_dir.mkdir()
    for command in slurm_bin_dir(cluster).iterdir():
        (bin_dir / command.name).symlink_to(command)
    squeue = bin_dir / "squeue"
    squeue.unlink()
    squeue.write_text(UNANSWERING_SQUEUE % shlex.quote(str(slurm_bin_dir(cluster) / "squeue")))
    squeue.chmod(0o755)
    return bin_dir


def assert_files_back_once_slurm_answers(site: SiteRuntime, bin_dir: Path, notice: bytes) -> None:
    """`podman run --rm` of a container that writes a file to its bind mount last and
    exits 3, through `bin_dir`'s squeue, which does not tell that its step has ended until
    the file `squeue.answers` beside it exists: the container's stderr says `notice` (its
    anchor waits), the file is not back yet; once squeue tells, podman exits 3 and the
    file is back."""
    out = Path(f"/var/tmp/scrun-ctld-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    program = "echo last > /out/f; exit 3"
    command = scrun_podman("run", "--rm", "-v", f"{out}:/out", IMAGE, "sh", "-c", program)
    podman = local_popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=site.env)
    assert podman.stderr is not None
    try:
        try:
            told = read_until(podman.stderr.fileno(), notice, 120)
            assert notice in told, told
            assert not (out / "f").exists()  # its stage-out waits
        finally:
            (bin_dir / "squeue.answers").touch()
            _, errors = podman.communicate(timeout=180)
        assert podman.returncode == 3, errors
        assert b"were not copied back" not in told + errors, told + errors
        assert (out / "f").read_text() == "last\n"
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_container_that_ends_while_slurmctld_does_not_answer_brings_its_files_back(
    cluster: Cluster, site_runtime: MakeSite, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    """slurmctld does not answer when the container ends (a restart, a failover; here its
    squeue fails until the test lets it answer, once the anchor said it waits): `podman
    run` waits, then the file the container wrote last is back, its exit code is its own
    and nothing is left. (The anchor gave up at the first unanswered question before,
    and podman's --rm removed the container before `scrun delete` could copy its files
    back: the file lost, the staged copy left.) Killing the real slurmctld does the same,
    but leaves its job COMPLETING for a minute after: slurmstepd's retry."""
    bin_dir = unanswering_slurm(cluster, tmp_path / "bin")
    staging = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()  # the cluster's
    site = site_runtime(staging, bin_dir=bin_dir)
    assert_files_back_once_slurm_answers(site, bin_dir, b"scrun: Slurm does not answer")


# squeue as the anchor sees it after a slurmctld restart it missed the step's end in: the
# step stays listed (its slurmstepd reports the end again a minute later), until the file
# beside it exists
LINGERING_SQUEUE = """#!/bin/sh
%s "$@" || exit
[ -e "$0.answers" ] && exit 0
case " $* " in *" -s "*) ;; *) exit 0 ;; esac
job=$(echo " $* " | sed -n 's/.* -j \\([0-9]*\\) .*/\\1/p')
[ -n "$job" ] && echo "$job.0 scrun"
"""


def test_a_step_slurm_lists_after_its_end_is_waited_for_and_its_files_come_back(
    cluster: Cluster, site_runtime: MakeSite, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    """slurmctld restarted while the container ended: it lists the step, cancelled or
    not, until slurmstepd reports its end again (a minute later; here squeue lists it
    until the test lets it go, once the anchor said it waits). The anchor waits for that,
    then stages out: the file the container wrote last is back. (The anchor gave up
    step_grace seconds after the cancel before: the file lost, the staged copy left, as
    seen with a real slurmctld killed and restarted during a container's last seconds.)"""
    bin_dir = unanswering_slurm(cluster, tmp_path / "bin")
    squeue = bin_dir / "squeue"
    squeue.write_text(LINGERING_SQUEUE % shlex.quote(str(slurm_bin_dir(cluster) / "squeue")))
    staging = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()  # the cluster's
    site = site_runtime(staging, settings={"step_grace": 2}, bin_dir=bin_dir)
    assert_files_back_once_slurm_answers(site, bin_dir, b"scrun: Slurm still lists the steps")


def test_a_container_whose_end_slurmctld_never_confirms_is_copied_back_by_a_later_delete(
    cluster: Cluster, site_runtime: MakeSite, tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    """slurmctld does not answer for longer than the site's `slurmctld_wait`: the anchor
    leaves stage-out to `scrun delete` and says so in one line; podman's --rm removes the
    container meanwhile. Once Slurm answers, `scrun delete ID` copies back what the
    container wrote to its bind mount (the spool kept the container's config) and leaves
    nothing."""
    bin_dir = unanswering_slurm(cluster, tmp_path / "bin")
    staging = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()  # the cluster's
    site = site_runtime(staging, settings={"slurmctld_wait": 1}, bin_dir=bin_dir)
    out = Path(f"/var/tmp/scrun-ctld-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    try:
        program = "echo last > /out/f; exit 3"
        done = site.podman("run", "--rm", "-v", f"{out}:/out", IMAGE, "sh", "-c", program)
        assert done.returncode == 3, done.stderr
        [line] = [line for line in done.stderr.splitlines() if "were not copied back" in line]
        container_id = line.split("container ", 1)[1].split("'s files", 1)[0]
        assert line.startswith(
            f"scrun: error: container {container_id}'s files were not copied back: Slurm "
            "cannot say whether its tasks have ended ("
        ), line
        assert line.endswith(
            f"`scrun delete {container_id}` copies them once Slurm says its tasks have ended"
        ), line
        assert not (out / "f").exists()
        (bin_dir / "squeue.answers").touch()
        deleted = site.scrun("delete", container_id)
        assert deleted.returncode == 0, deleted.stderr
        assert (out / "f").read_text() == "last\n"
    finally:
        (bin_dir / "squeue.answers").touch()
        shutil.rmtree(out, ignore_errors=True)


def stepd_of(cluster: Cluster, job_id: int) -> int:
    """The pid of the slurmstepd that runs the container's step of `job_id` (the one named
    `scrun`) on its node (the nodes' processes are this host's, one pid space); 0 while
    there is none."""
    listed = cluster.run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i %j"], timeout=30)
    steps = [line.split()[0] for line in listed.stdout.splitlines() if line.endswith(" scrun")]
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    for line in done.stdout.splitlines()[1:]:
        pid, _, args = line.strip().partition(" ")
        if steps and args.strip() == f"slurmstepd: [{steps[0]}]":
            return int(pid)
    return 0


def kill_what_the_node_runs_of(job_id: int) -> None:
    """SIGKILL the processes a node still runs of step `job_id`.0 (crun, named after the
    step, its wrapper, and the container's processes below them), and wait for them to go:
    they would live on for minutes, holding the job's cgroups."""

    def argv(pid: str) -> list[bytes]:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            return []

    name = f".{job_id}.0.0".encode()
    found = [pid for pid in os.listdir("/proc") if (args := argv(pid)) and args[-1].endswith(name)]
    tree = set(found)
    while found:
        pid = found.pop()
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                children = set(task.read_text().split()) - tree
            except OSError:
                continue
            tree |= children
            found.extend(children)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    wait_for("the lost step's processes gone", lambda: not any(argv(pid) for pid in tree))


def test_a_sigkill_ends_a_container_whose_step_slurm_lost(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """The step's slurmstepd dies on its node: Slurm can no longer signal the step, and its
    srun would wait until the job's time limit (`podman stop` failing each time). A `kill`
    SIGKILL still ends the container, within the 5 s podman waits: 2 s later the anchor
    says why on its stderr and cancels the job; the container exits 137, what it wrote to
    its bind mount before comes back, and nothing is left."""
    staging = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()  # the cluster's
    site = site_runtime(staging)
    out = Path(f"/var/tmp/scrun-lost-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    name = f"lost-{uuid.uuid4().hex[:10]}"
    job_id = -1
    try:
        program = "echo before > /out/f; echo running; exec sleep 300"
        done = site.podman(
            "run", "-d", "--name", name, "-v", f"{out}:/out", IMAGE, "sh", "-c", program
        )
        assert done.returncode == 0, done.stderr
        container_id = done.stdout.strip()
        wait_for("the container running", lambda: "running" in site.podman("logs", name).stdout)
        job_id = state_of(site, container_id)["jobId"]
        stepd = wait_for(f"step {job_id}.0's slurmstepd", lambda: stepd_of(cluster, job_id))
        os.kill(stepd, signal.SIGKILL)
        killed = site.podman("kill", "-s", "KILL", name)
        assert killed.returncode == 0, killed.stderr
        waited = site.podman("wait", name, timeout=60)
        assert waited.stdout.strip() == "137", waited
        said = site.podman("logs", name).stderr
        assert (
            f"scrun: error: container {container_id}'s step still runs 2 s after SIGKILL: "
            f"cancelling job {job_id}"
        ) in said, said
        assert (out / "f").read_text() == "before\n"
        assert site.podman("rm", name).returncode == 0
    finally:
        site.podman("rm", "-f", "-t", "0", name)
        shutil.rmtree(out, ignore_errors=True)
        # The slurmstepd killed here would have killed the step's processes and run
        # oci.conf's RunTimeDelete at the step's end: what the node still runs of the step,
        # and its crun state, are the fault's to leave, not scrun's.
        kill_what_the_node_runs_of(job_id)
        for root in node_roots(cluster.env).values():
            for state in (root / "run" / "user").glob(f"*/crun/*.{job_id}.*"):
                shutil.rmtree(state)
    no_leftovers()


def test_files_come_back_when_killwait_outlasts_step_grace(
    cluster: Cluster, site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    """Someone else's scancel: the job's tasks (which ignore SIGTERM here) live until
    KillWait ends them, 5 s on this cluster, here longer than the site's `step_grace` (1 s;
    30 s against 10 with Slurm's and scrun's defaults). `podman rm -f` still brings back
    what the container wrote to its bind mount and leaves nothing: `scrun delete` waits
    KillWait and step_grace for the tasks before it stages out. It used to wait
    step_grace alone, skip stage-out and leave the staged copy behind."""
    staging = (Path(cluster.slurm_conf).parent / "scrun.lua").read_text()  # the cluster's
    site = site_runtime(staging, {"step_grace": 1})
    out = Path(f"/var/tmp/scrun-killwait-{uuid.uuid4().hex[:10]}")
    out.mkdir()
    name = f"killwait-{uuid.uuid4().hex[:10]}"
    try:
        program = "trap '' TERM; echo before > /out/f; echo running; exec sleep 300"
        done = site.podman(
            "run", "-d", "--name", name, "-v", f"{out}:/out", IMAGE, "sh", "-c", program
        )
        assert done.returncode == 0, done.stderr
        wait_for("the container running", lambda: "running" in site.podman("logs", name).stdout)
        job_id = state_of(site, done.stdout.strip())["jobId"]
        assert cluster.run(["scancel", str(job_id)]).returncode == 0
        removed = site.podman("rm", "-f", "-t", "0", name)
        assert removed.returncode == 0, removed.stderr
        assert (out / "f").read_text() == "before\n"
    finally:
        site.podman("rm", "-f", "-t", "0", name)
        shutil.rmtree(out, ignore_errors=True)
    no_leftovers()
