"""scrun.lua on the real cluster, through podman: the man page's seed script staging a
container's rootfs to scratch and back, stage-in failures reaching podman's caller, and what
the hooks see (remote and allocator commands, argument types, the job env).

Each test runs podman against its own site (`site_runtime`: a private copy of the cluster's
config dir with the test's scrun.lua beside slurm.conf) and checks that nothing is left
behind (`no_leftovers`: no job, no spool directory, no anchor).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import MAN_26_05_SCRIPT, SEED_SCRIPT, with_scratch_path
from helpers import copy_out, wait_for
from scrunlib.slurm_commands import job_tag

if TYPE_CHECKING:
    import subprocess

    from conftest import Cluster, SiteRuntime

IMAGE = "localhost/busybox"

MakeSite = Callable[[str | None], "SiteRuntime"]


@pytest.fixture
def scratch(cluster: Cluster) -> Path:
    """Where the seed script (`seed_script`: scratch_path = the cluster's shared dir)
    stages: <scratch_path>/<uid>/slurm/scrun/<id>/."""
    return Path(cluster["SCRUN_SHARED_DIR"]) / str(os.getuid()) / "slurm" / "scrun"


def lua_string(text: str) -> str:
    """A Lua string literal (JSON's escapes are valid Lua for the paths used here)."""
    return json.dumps(text)


@pytest.fixture
def containers(no_leftovers: Callable[..., None]) -> Iterator[list[tuple[SiteRuntime, str]]]:
    """Register (site, name) of a container the test keeps (no --rm): force-removed at the
    end if the test did not remove it. Depends on no_leftovers so that this cleanup runs
    before the leftovers check."""
    created: list[tuple[SiteRuntime, str]] = []
    yield created
    for site, name in created:
        if site.podman("container", "exists", name).returncode == 0:
            site.podman("rm", "-f", "-t", "0", name)


def read_cid(path: Path) -> str:
    cid = path.read_text().strip()
    assert len(cid) == 64 and all(c in "0123456789abcdef" for c in cid), repr(cid)
    return cid


def run_rm(
    site: SiteRuntime, cidfile: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """`podman run ARGS` then `podman rm`, like `podman run --rm ARGS`, and the container's
    id: podman 5 deletes the --cidfile together with a --rm container (4.3 keeps it)."""
    done = site.podman("run", "--cidfile", str(cidfile), *args)
    cid = read_cid(cidfile)
    removed = site.podman("rm", "--force", cid)
    assert removed.returncode == 0, removed.stderr
    return done, cid


def tagged_jobs(cluster: Cluster, container_id: str) -> dict[int, str]:
    """Job id → state of every job slurmctld still knows (MinJobAge) that scrun tagged
    with `container_id` (salloc --comment, scrunlib.slurm_commands.job_tag)."""
    return {
        int(record["JobId"]): record["JobState"]
        for record in cluster.job_records()
        if record.get("Comment") == job_tag(container_id)
    }


# ----------------------------------------------------------------------------- seed script


@pytest.mark.parametrize(
    "script", [SEED_SCRIPT, MAN_26_05_SCRIPT], ids=["seed", "slurm-26.05-man-page"]
)
def test_seed_script_runs_a_container(
    site_runtime: MakeSite,
    cluster: Cluster,
    scratch: Path,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
    script: Path,
) -> None:
    """The example as shipped but for its scratch_path, which must be on the shared dir."""
    site = site_runtime(with_scratch_path(script, cluster["SCRUN_SHARED_DIR"]))
    cidfile = tmp_path / "cid"
    done, cid = run_rm(site, cidfile, IMAGE, "cat", "/etc/hostname")
    assert done.returncode == 0, done.stderr
    # /etc/hostname is one of podman's bind mounts, which the seed script replaces by a copy
    # in the staged rootfs (the image has none); with netns=host it is this host's name.
    assert done.stdout.strip() == socket.gethostname(), done
    wait_for(f"scratch copy {scratch / cid} removed", lambda: not (scratch / cid).exists())


def test_seed_script_stages_the_rootfs_and_syncs_it_back(
    site_runtime: MakeSite,
    seed_script: str,
    scratch: Path,
    tmp_path: Path,
    containers: list[tuple[SiteRuntime, str]],
) -> None:
    site = site_runtime(seed_script)
    name = f"scrun-stage-{uuid.uuid4().hex[:10]}"
    # Writes /marker, waits for the test to create /go (in the staged copy: proof that the
    # container runs there), then writes /result and exits.
    program = (
        "echo staged > /marker; i=0; "
        "while [ ! -e /go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
        "[ -e /go ] && echo synced > /result"
    )
    started = site.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", program)
    containers.append((site, name))
    assert started.returncode == 0, started.stderr
    inspected = site.podman("inspect", "-f", "{{.ID}} {{.StaticDir}}", name)
    assert inspected.returncode == 0, inspected.stderr
    cid, static_dir = inspected.stdout.split()
    assert started.stdout.strip() == cid and len(cid) == 64
    original_config = json.loads((Path(static_dir) / "config.json").read_text())
    original_rootfs = Path(original_config["root"]["path"])

    staged = scratch / cid
    marker = staged / "rootfs" / "marker"
    # The shell creates /marker, then writes to it: wait for what it writes.
    wait_for("/marker in the staged rootfs", lambda: marker.exists() and marker.stat().st_size)
    assert marker.read_text() == "staged\n"
    # rsynced: the image's files are there, identical; the original did not get /marker.
    assert (staged / "rootfs/bin/busybox").read_bytes() == (
        original_rootfs / "bin/busybox"
    ).read_bytes()
    assert not (original_rootfs / "marker").exists(), "the container wrote to the original"
    staged_config = json.loads((staged / "config.json").read_text())
    assert os.path.normpath(staged_config["root"]["path"]) == str(staged / "rootfs")
    assert f"SCRUN_CONTAINER_ID={cid}" in staged_config["process"]["env"]

    state = site.scrun("state", cid)
    assert state.returncode == 0, state.stderr
    reported = json.loads(state.stdout)
    assert reported["status"] == "running"
    assert os.path.normpath(reported["bundle"]) == str(staged), reported
    assert os.path.normpath(reported["rootfs"]) == str(staged / "rootfs"), reported

    (staged / "rootfs" / "go").touch()
    waited = site.podman("wait", name, timeout=60)
    assert (waited.returncode, waited.stdout.strip()) == (0, "0"), waited.stderr
    wait_for(f"scratch copy {staged} removed by stage_out", lambda: not staged.exists())

    # stage_out synced the container's writes back into podman's rootfs.
    for path, content in (("/result", "synced\n"), ("/marker", "staged\n")):
        copy = tmp_path / path.strip("/")
        copied = copy_out(site.podman, name, path, str(copy))
        assert copied.returncode == 0, copied.stderr
        assert copy.read_text() == content
    removed = site.podman("rm", name)
    assert removed.returncode == 0, removed.stderr


def test_delete_stages_out_after_the_anchor_was_killed(
    site_runtime: MakeSite,
    seed_script: str,
    scratch: Path,
    cluster: Cluster,
    containers: list[tuple[SiteRuntime, str]],
) -> None:
    """SIGKILL leaves the anchor no chance to stage out: `podman rm` (scrun delete) runs the
    seed script's stage-out, which syncs the copy back and removes it."""
    site = site_runtime(seed_script)
    name = f"scrun-crash-{uuid.uuid4().hex[:10]}"
    started = site.podman("run", "-d", "--name", name, IMAGE, "sh", "-c", "echo x > /w; sleep 300")
    containers.append((site, name))
    assert started.returncode == 0, started.stderr
    cid = started.stdout.strip()
    staged = scratch / cid
    wait_for("/w in the staged rootfs", lambda: (staged / "rootfs" / "w").exists())
    state = json.loads(site.scrun("state", cid).stdout)
    assert state["status"] == "running", state
    os.kill(state["pid"], signal.SIGKILL)

    removed = site.podman("rm", "-f", "-t", "0", name)
    assert removed.returncode == 0, removed.stderr
    assert not staged.exists(), f"scratch copy {staged} left behind"
    jobs = tagged_jobs(cluster, cid)
    assert all(job_state != "RUNNING" for job_state in jobs.values()), jobs


# ----------------------------------------------------------------------------- failures

FAILING_STAGE_OUT = """
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                               config_file, job_id, user_id, group_id)
  local f = assert(io.open(%s, "w"))
  f:write(string.format("%%s %%d", id, job_id))
  f:close()
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""

STAGE_IN_ERROR = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  slurm.log_error("scratch quota exceeded for %s", id)
  return slurm.ERROR
end
"""

STAGE_IN_RAISES = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  error("rsync target unreachable")
end
"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param(STAGE_IN_ERROR, "scratch quota exceeded for ", id="returns-error"),
        pytest.param(STAGE_IN_RAISES, "scrun.lua:4: rsync target unreachable", id="raises"),
    ],
)
def test_stage_in_failure_fails_podman_run(
    site_runtime: MakeSite,
    cluster: Cluster,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
    script: str,
    expected: str,
) -> None:
    """podman run fails with the script's own words; the job is gone and stage_out still
    ran (stage_in counts as having run), with the same container id and job."""
    stage_out_ran = tmp_path / "stage_out_ran"
    site = site_runtime(script + FAILING_STAGE_OUT % lua_string(str(stage_out_ran)))
    cidfile = tmp_path / "cid"
    done, cid = run_rm(site, cidfile, IMAGE, "true")
    assert done.returncode != 0, done
    assert "Error: OCI runtime error" in done.stderr, done.stderr
    assert expected in done.stderr, done.stderr
    assert "stage-in failed" in done.stderr, done.stderr
    jobs = tagged_jobs(cluster, cid)
    assert len(jobs) == 1, jobs  # the job it allocated, ended (no_leftovers: not in squeue)
    assert stage_out_ran.read_text() == f"{cid} {next(iter(jobs))}"
    if script is STAGE_IN_ERROR:
        assert f"scratch quota exceeded for {cid}" in done.stderr


def test_syntax_error_fails_podman_run(
    site_runtime: MakeSite, no_leftovers: Callable[..., None]
) -> None:
    site = site_runtime(
        "function slurm_scrun_stage_in(\n  return slurm.SUCCESS\nend\n"
        "function slurm_scrun_stage_out() return slurm.SUCCESS end\n"
    )
    done = site.podman("run", "--rm", IMAGE, "true")
    assert done.returncode != 0, done
    assert "Error: OCI runtime error" in done.stderr, done.stderr
    script = site.dir / "etc" / "scrun.lua"
    assert f"unable to load {script}: {script}:2:" in done.stderr, done.stderr


# ----------------------------------------------------------------------------- hook contract

PROBE_SCRIPT = """
local out = %s
-- Whole or not at all: the test reads a finding as soon as it exists.
local function write(name, text)
  local f = assert(io.open(out .. "/" .. name .. ".tmp", "w"))
  f:write(text)
  f:close()
  os.rename(out .. "/" .. name .. ".tmp", out .. "/" .. name)
end
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local status, output = slurm.remote_command(
    "echo node $SLURMD_NODENAME $SLURM_NODEID $SLURM_JOB_ID")
  write("remote", string.format("%%d\\n%%s", status, output))
  status, output = slurm.allocator_command("env")
  write("allocator_env", output)
  local listed = {}
  for _, entry in ipairs(job_env) do listed[#listed + 1] = entry end
  local counted = 0
  for _ in pairs(job_env) do counted = counted + 1 end
  -- The test cluster's two nodes share one kernel's cgroups, where two crun instances in
  -- podman's one linux.cgroupsPath collide (the step fails at random): run a copy without
  -- it, from the rootfs the test put beside it, without podman's bind mounts and hooks.
  local f = assert(io.open(config_file, "rb"))
  local config = slurm.from_json(f:read("a"))
  f:close()
  config.linux.cgroupsPath = nil
  config.root.path = out .. "/bundle/rootfs"
  local mounts = {}
  for _, mount in ipairs(config.mounts) do
    if mount.type ~= "bind" then mounts[#mounts + 1] = mount end
  end
  config.mounts = mounts
  config.hooks = nil
  f = assert(io.open(out .. "/bundle/config.json", "wb"))
  f:write(slurm.to_json(config))
  f:close()
  local original = slurm.set_bundle_path(out .. "/bundle")
  write("stage_in", slurm.to_json({
    id = id, bundle = bundle, set_bundle_path_returned = original, spool_dir = spool_dir,
    job_id = job_id, job_id_type = math.type(job_id),
    user_id_type = math.type(user_id), group_id_type = math.type(group_id),
    ipairs = listed, pairs_count = counted, length = #job_env,
  }))
  return slurm.SUCCESS
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
                               config_file, job_id, user_id, group_id)
  write("stage_out", slurm.to_json({
    bundle = bundle, orig_bundle = orig_bundle, spool_dir = spool_dir, job_id = job_id,
    job_id_type = math.type(job_id), user_id_type = math.type(user_id),
  }))
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


@pytest.fixture
def probe_site(site_runtime: MakeSite, cluster: Cluster) -> Iterator[tuple[SiteRuntime, Path]]:
    """A site whose scrun.lua records what its hooks see in `findings`, a directory in the
    shared scratch dir, and runs the container from findings/bundle: the cluster's busybox
    rootfs copied there (the nodes see neither podman's storage nor its bind mounts)."""
    findings = Path(cluster["SCRUN_SHARED_DIR"]) / f"probe-{uuid.uuid4().hex[:10]}"
    shutil.copytree(Path(cluster.bundle) / "rootfs", findings / "bundle" / "rootfs", symlinks=True)
    for path in (findings, findings / "bundle"):
        path.chmod(0o777)
    yield site_runtime(PROBE_SCRIPT % lua_string(str(findings))), findings
    shutil.rmtree(findings, ignore_errors=True)


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_hooks_on_a_two_node_job(
    probe_site: tuple[SiteRuntime, Path],
    cluster: Cluster,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    site, findings = probe_site
    site.env["SCRUN_PROBE_NOT_IN_JOB_ENV"] = "leaked"
    cidfile = tmp_path / "cid"
    done, cid = run_rm(site, cidfile, "-e", "SCRUN_JOB_NUM_NODES=2", IMAGE, "true")
    assert done.returncode == 0, done.stderr
    stage_in = json.loads((findings / "stage_in").read_text())
    job_id = stage_in["job_id"]

    # allocator_command: the job env, not the caller's environment.
    env = parse_env((findings / "allocator_env").read_text())
    assert env["SLURM_JOB_ID"] == str(job_id)
    assert env["SLURM_JOB_NUM_NODES"] == "2"
    assert env["SCRUN_CONTAINER_ID"] == cid
    assert env["SCRUN_SPOOL_DIR"].rstrip("/").endswith(f"/{cid}")
    assert "SCRUN_PROBE_NOT_IN_JOB_ENV" not in env
    assert "CONTAINERS_CONF" not in env

    # remote_command: one task on each of the job's two nodes (n1 and n2), inside the job.
    expanded = cluster.run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]])
    nodes = sorted(expanded.stdout.split())
    assert len(nodes) == 2, expanded
    status, *lines = (findings / "remote").read_text().splitlines()
    assert status == "0", lines
    ran = sorted(tuple(line.split()[1:]) for line in lines if line.startswith("node "))
    assert sorted(name for name, _, _ in ran) == nodes, lines
    assert sorted(node_id for _, node_id, _ in ran) == ["0", "1"], lines
    assert {job for _, _, job in ran} == {str(job_id)}, lines

    # Hook arguments: integer ids, a 1-based job_env that ipairs walks completely.
    assert stage_in["id"] == cid
    assert stage_in["job_id_type"] == "integer", stage_in
    assert stage_in["user_id_type"] == stage_in["group_id_type"] == "integer", stage_in
    listed = stage_in["ipairs"]
    assert len(listed) == stage_in["pairs_count"] == stage_in["length"] > 0, stage_in
    assert f"SLURM_JOB_ID={job_id}" in listed and f"SCRUN_CONTAINER_ID={cid}" in listed
    # The same env the command got (/bin/sh drops names that are no shell identifiers,
    # such as SCRUN_ANNOTATION_io.container.manager, from what it passes on).
    job_env = parse_env("\n".join(listed))
    assert any("." in name for name in job_env)  # the annotations are in job_env itself
    shell_names = {name: value for name, value in job_env.items() if name.isidentifier()}
    assert shell_names.items() <= env.items()

    stage_out = json.loads((findings / "stage_out").read_text())
    assert stage_out["job_id"] == job_id and stage_out["job_id_type"] == "integer"
    assert stage_out["user_id_type"] == "integer"
    # set_bundle_path: returns the original; stage_out gets the new one and the original.
    assert stage_in["set_bundle_path_returned"] == stage_in["bundle"]
    assert stage_out["bundle"] == str(findings / "bundle")
    assert stage_out["orig_bundle"] == stage_in["bundle"]


def test_spool_dir_is_root_slash_id_slash(
    probe_site: tuple[SiteRuntime, Path], tmp_path: Path, no_leftovers: Callable[..., None]
) -> None:
    """spool_dir (the hooks' argument) and SCRUN_SPOOL_DIR are `<root>/<id>/`, with the
    trailing slash upstream gives them, as scrun-stage passes them: a script may append a
    file name to it directly."""
    site, findings = probe_site
    cidfile = tmp_path / "cid"
    done, cid = run_rm(site, cidfile, IMAGE, "true")
    assert done.returncode == 0, done.stderr
    env = parse_env((findings / "allocator_env").read_text())
    stage_in = json.loads((findings / "stage_in").read_text())
    stage_out = json.loads((findings / "stage_out").read_text())
    expected = f"{env['SCRUN_ROOT']}/{cid}/"
    assert {
        "SCRUN_SPOOL_DIR": env["SCRUN_SPOOL_DIR"],
        "stage_in spool_dir": stage_in["spool_dir"],
        "stage_out spool_dir": stage_out["spool_dir"],
    } == dict.fromkeys(("SCRUN_SPOOL_DIR", "stage_in spool_dir", "stage_out spool_dir"), expected)


def test_create_without_bundle_tells_the_script(
    probe_site: tuple[SiteRuntime, Path],
    cluster: Cluster,
    tmp_path: Path,
    no_leftovers: Callable[..., None],
) -> None:
    """`scrun create ID` without --bundle runs the bundle in the cwd, and the script learns
    that no --bundle was given: set_bundle_path returns nil, stage_out's orig_bundle is nil
    and SCRUN_SUBMISSION_BUNDLE is empty, as upstream tells a script."""
    site, findings = probe_site
    bundle = tmp_path / "cwd-bundle"
    bundle.mkdir()
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["root"]["path"] = str(Path(cluster.bundle) / "rootfs")
    (bundle / "config.json").write_text(json.dumps(config))
    cid = f"scrun-cwd-{uuid.uuid4().hex[:10]}"
    # Not through pipes: the anchor keeps create's stdout/stderr (the container's) open.
    output = tmp_path / "create.out"
    with output.open("w") as stream:
        try:
            created = site.scrun("create", cid, cwd=bundle, stdout=stream, stderr=stream)
        finally:
            deleted = site.scrun("delete", "--force", cid)
    assert created.returncode == 0, output.read_text()
    assert deleted.returncode == 0, deleted.stderr
    wait_for("stage_out's findings", lambda: (findings / "stage_out").exists())
    stage_in = json.loads((findings / "stage_in").read_text())
    stage_out = json.loads((findings / "stage_out").read_text())
    env = parse_env((findings / "allocator_env").read_text())
    assert stage_in["bundle"] == str(bundle)  # the cwd is the bundle
    assert env["SCRUN_BUNDLE"] == str(bundle)
    assert {
        "set_bundle_path returned": stage_in.get("set_bundle_path_returned"),
        "stage_out orig_bundle": stage_out.get("orig_bundle"),
        "SCRUN_SUBMISSION_BUNDLE": env.get("SCRUN_SUBMISSION_BUNDLE"),
    } == {
        "set_bundle_path returned": None,
        "stage_out orig_bundle": None,
        "SCRUN_SUBMISSION_BUNDLE": "",
    }
