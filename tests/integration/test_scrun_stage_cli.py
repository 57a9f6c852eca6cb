"""scrun-stage on the real cluster: a site admin reproducing a staging run by hand with the
man page's seed script, in a job scrun-stage allocates (and cancels) or in one of their own.

The bundles here are private: config.json from the cluster's busybox bundle with root.path
made absolute, pointing at the shared rootfs only where nothing is written back to it
(stage-out rsyncs with --delete-after into root.path, which would strip the shared rootfs
of the proc/ and sys/ that stage-in excludes).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from unittest.mock import ANY

import pytest
from conftest import SEED_SCRIPT, node_roots, with_private_staging
from helpers import wait_for
from scrunlib.slurm_commands import job_tag
from users import IMAGE, assert_users_clean, pick_users, user_site

if TYPE_CHECKING:
    from conftest import Cluster, SiteRuntime

REPO = Path(__file__).resolve().parents[2]
SCRUN_STAGE = REPO / ".venv" / "bin" / "scrun-stage"
SCRATCH = Path(f"/run/user/{os.getuid()}/slurm/scrun")
ENDED = {"CANCELLED", "COMPLETED", "FAILED", "TIMEOUT"}

FAILING_SCRIPT = """\
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  slurm.log_error("no scratch space on %s", "/scratch")
  return slurm.ERROR
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""

REMOTE_SCRIPT = """\
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
                              job_env)
  local status, output = slurm.remote_command("echo on $SLURMD_NODENAME in $SLURM_JOB_ID")
  return status
end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""


def scrun_stage(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.run([str(SCRUN_STAGE), *args], timeout=120)


def make_bundle(cluster: Cluster, directory: Path, rootfs: Path) -> Path:
    """`directory/config.json`: the cluster bundle's, with root.path = `rootfs` (absolute)."""
    config = json.loads((Path(cluster.bundle) / "config.json").read_text())
    config["root"]["path"] = str(rootfs)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


@pytest.fixture
def private_bundle(cluster: Cluster, tmp_path: Path) -> Path:
    """A bundle with its own copy of the busybox rootfs (stage-out writes into it)."""
    rootfs = tmp_path / "rootfs"
    shutil.copytree(Path(cluster.bundle) / "rootfs", rootfs, symlinks=True)
    return make_bundle(cluster, tmp_path / "bundle", rootfs)


@pytest.fixture
def container_id() -> Iterator[str]:
    """A fresh id; its scratch copy is removed afterwards if a test left it."""
    cid = f"stagecli-{uuid.uuid4().hex[:12]}"
    yield cid
    shutil.rmtree(SCRATCH / cid, ignore_errors=True)


def job_states(cluster: Cluster, container_id: str) -> dict[int, str]:
    """Every job slurmctld still knows (MinJobAge) whose comment tags `container_id`."""
    return {
        int(record["JobId"]): record["JobState"]
        for record in cluster.job_records()
        if record.get("Comment") == job_tag(container_id)
    }


def job_state(cluster: Cluster, job_id: int) -> str:
    (record,) = cluster.job_records(str(job_id))
    return record["JobState"]


def wait_job_ended(cluster: Cluster, job_id: int, timeout: float = 15.0) -> None:
    wait_for(
        f"job {job_id} to end after scrun-stage exited",
        lambda: job_state(cluster, job_id) in ENDED,
        timeout,
        lambda: f"it is {job_state(cluster, job_id)}",
    )


def reported_job(text: str) -> int:
    match = re.search(r"^job +(\d+)$", text, re.MULTILINE)
    assert match, text
    return int(match.group(1))


# ----------------------------------------------------------------------------- by hand


def test_in_then_out_with_allocation(
    cluster: Cluster, private_bundle: Path, container_id: str
) -> None:
    """`in` stages the rootfs to scratch and shows how; the job it allocated is gone; the
    container's writes (simulated) come back with `out`, which removes the scratch copy."""
    rootfs = private_bundle.parent / "rootfs"
    staged = SCRATCH / container_id
    common = ["--bundle", str(private_bundle), "--script", str(SEED_SCRIPT)]
    common += ["--id", container_id, "--allocate"]

    done = scrun_stage(cluster, "in", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    job_id = reported_job(out)
    dst_bundle = f"{SCRATCH}//{container_id}/"  # the seed script's own spelling
    dst_rootfs = f"{dst_bundle}rootfs/"
    assert "== slurm_scrun_stage_in: ok (status 0" in out, out
    assert f"\nbundle      {private_bundle} -> {dst_bundle}\n" in out, out
    assert f"\nroot path   {rootfs} -> {dst_rootfs}\n" in out, out
    assert "job env     " in out and f"\n  SLURM_JOB_ID={job_id}\n" in out, out
    # as the anchor's own job's: what salloc gave the job holder (the record has no such one)
    assert f"from salloc of job {job_id}\n" in out and "\n  SLURM_TASKS_PER_NODE=1\n" in out, out
    rsync = (
        "/usr/bin/env rsync --exclude sys --exclude proc --numeric-ids --delete-after "
        f"--ignore-errors --stats -a -- {rootfs}/ {dst_rootfs}/"
    )
    assert re.search(r"\[3\] allocator  exit 0 .*\n      \$ " + re.escape(rsync) + "\n", out), out
    assert "      | Number of files: " in out, out  # rsync's --stats, as the command printed
    diff = out[out.index("config.json diff\n") :]
    assert f"  +++ {dst_bundle}config.json\n" in diff, diff
    assert f'  -    "path": "{rootfs}",\n' in diff, diff
    assert f'  +    "path": "{dst_rootfs}",\n' in diff, diff
    assert '  +    "uidMappings": [\n' in diff and '  -    "rlimits": [\n' in diff, diff
    assert f'  +      "SLURM_JOB_ID={job_id}",\n' in diff, diff

    staged_config = json.loads((staged / "config.json").read_text())
    assert os.path.normpath(staged_config["root"]["path"]) == str(staged / "rootfs")
    assert (staged / "rootfs/bin/busybox").read_bytes() == (rootfs / "bin/busybox").read_bytes()
    wait_job_ended(cluster, job_id)
    assert job_states(cluster, container_id) == {job_id: "CANCELLED"}

    # What the container would have written, then stage-out by hand.
    (staged / "rootfs" / "from-the-job").write_text("written in the job\n")
    done = scrun_stage(cluster, "out", *common, "--staged-bundle", str(staged))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    out_job = reported_job(out)
    assert "== slurm_scrun_stage_out: ok (status 0" in out, out
    back = (
        "/usr/bin/env rsync --numeric-ids --delete-after --ignore-errors --stats -a -- "
        f"{staged}/rootfs/ {rootfs}/"
    )
    assert f"      $ {back}\n" in out, out
    assert f"      $ /usr/bin/rm --preserve-root=all --one-file-system -dr -- {staged}\n" in out
    assert (rootfs / "from-the-job").read_text() == "written in the job\n"
    assert not staged.exists()
    wait_job_ended(cluster, out_job)
    assert job_states(cluster, container_id) == {job_id: "CANCELLED", out_job: "CANCELLED"}


def test_both_in_an_existing_job(
    cluster: Cluster, private_bundle: Path, container_id: str, tmp_path: Path
) -> None:
    """--job-id: the job env comes from that job's record, the commands run in it, and
    scrun-stage leaves the job running (it is not its own)."""
    salloc = cluster.run(
        [
            "salloc",
            "--no-shell",
            "-N2",
            "-J",
            "scrun-stage-cli",
            f"--comment={job_tag(container_id)}",
        ],
        timeout=60,
    )
    match = re.search(r"Granted job allocation (\d+)", salloc.stderr)
    assert salloc.returncode == 0 and match, salloc.stderr
    job_id = int(match.group(1))
    try:
        done = scrun_stage(
            cluster, "both", "--bundle", str(private_bundle), "--script", str(SEED_SCRIPT),
            "--id", container_id, "--job-id", str(job_id), "--format", "json",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["job_id"] == job_id and report["exit_status"] == 0
        assert report["job_env_source"] == f"scontrol show job {job_id}"
        env = dict(entry.split("=", 1) for entry in report["job_env"])
        assert env["SLURM_JOB_ID"] == str(job_id)
        assert env["SLURM_JOB_NUM_NODES"] == "2"
        assert env["SLURM_JOB_NAME"] == "scrun-stage-cli"
        assert env["SCRUN_CONTAINER_ID"] == container_id
        stage_in, stage_out = report["stages"]
        assert stage_in["ok"] and stage_out["ok"], report
        assert stage_in["bundle"] == f"{SCRATCH}//{container_id}/"
        assert stage_out["bundle_before"] == stage_in["bundle"]
        assert [c["status"] for c in stage_out["commands"]] == [0, 0], stage_out
        assert not (SCRATCH / container_id).exists()

        # A remote command under scrun-stage is a step of this job, on both its nodes.
        remote_script = tmp_path / "remote.lua"
        remote_script.write_text(REMOTE_SCRIPT)
        done = scrun_stage(
            cluster, "in", "--bundle", str(private_bundle), "--script", str(remote_script),
            "--id", container_id, "--job-id", str(job_id), "--format", "json",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        (command,) = json.loads(done.stdout)["stages"][0]["commands"]
        assert command["kind"] == "remote" and command["status"] == 0, command
        nodes = cluster.run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]])
        assert sorted(command["output"].splitlines()) == sorted(
            f"on {node} in {job_id}" for node in nodes.stdout.split()
        )
        assert job_state(cluster, job_id) == "RUNNING"
    finally:
        cluster.run(["scancel", str(job_id)], timeout=30)


# ----------------------------------------------------------------------------- exit codes


def test_stage_in_failure_exits_1_and_cancels_its_job(
    cluster: Cluster, tmp_path: Path, container_id: str
) -> None:
    script = tmp_path / "failing.lua"
    script.write_text(FAILING_SCRIPT)
    bundle = make_bundle(cluster, tmp_path / "bundle", Path(cluster.bundle) / "rootfs")
    done = scrun_stage(
        cluster, "in", "--bundle", str(bundle), "--script", str(script), "--id", container_id,
        "--allocate",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "== slurm_scrun_stage_in: FAILED (status -1" in done.stdout, done.stdout
    assert "no scratch space on /scratch" in done.stdout, done.stdout
    job_id = reported_job(done.stdout)
    wait_job_ended(cluster, job_id)
    assert job_states(cluster, container_id) == {job_id: "CANCELLED"}


def test_load_error_exits_3_before_any_job(
    cluster: Cluster, tmp_path: Path, container_id: str
) -> None:
    script = tmp_path / "broken.lua"
    script.write_text("function slurm_scrun_stage_in(\n  return 0\nend\n")
    bundle = make_bundle(cluster, tmp_path / "bundle", Path(cluster.bundle) / "rootfs")
    done = scrun_stage(
        cluster, "in", "--bundle", str(bundle), "--script", str(script), "--id", container_id,
        "--allocate",
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(f"scrun-stage: error: unable to load {script}: {script}:2:")
    assert done.stdout == ""
    assert job_states(cluster, container_id) == {}  # not even a cancelled one


# ----------------------------------------------------------------------------- the image cache


@pytest.fixture
def private_scratch(cluster: Cluster) -> Iterator[Path]:
    """A scratch of this test's own under the nodes' shared dir (mode 1777, as a site's)."""
    scratch = Path(cluster["SCRUN_SHARED_DIR"]) / f"stage-cache-{uuid.uuid4().hex[:10]}"
    scratch.mkdir()
    scratch.chmod(0o1777)
    yield scratch
    shutil.rmtree(scratch)


def cache_rows(text: str) -> dict[str, list[str]]:
    """`cache list`'s rows: key → its columns (size, last use, state, users)."""
    rows = (re.split(r"\s{2,}", line) for line in text.splitlines()[2:])
    return {row[0]: row[1:] for row in rows}


def test_the_image_cache_listed_verified_and_pruned(
    cluster: Cluster, private_scratch: Path, site_runtime: Callable[..., SiteRuntime]
) -> None:
    """A container of busybox through the shipped shared-scratch.lua, as root and as a test
    user, fills each one's cache with one image; `scrun-stage cache` lists it (as its user;
    root names the user with --user), verify finds it as imported and names it once a file
    of it changed, prune removes it (no container uses it any more)."""
    text = (REPO / "docs" / "scrun-lua" / "shared-scratch.lua").read_text()
    site = site_runtime(text.replace('"/scratch"', f'"{private_scratch}"', 1))
    person = pick_users(cluster.exports, cluster.slurm_conf)[0]
    done = site.podman("run", "--rm", IMAGE, "true")
    assert done.returncode == 0, done.stderr
    done = person.podman("run", "--rm", IMAGE, "true", env=user_site(person, site))
    assert done.returncode == 0, done.stderr
    stage = [str(SCRUN_STAGE), "cache"]
    options = ["--scratch", str(private_scratch)]
    as_root = cluster.run

    def as_person(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return person.sh(shlex.join(argv))

    for as_user, user_args in ((as_root, []), (as_person, []), (as_root, ["--user", person.name])):
        listed = as_user([*stage, "list", *options, *user_args])
        assert listed.returncode == 0, listed.stderr
        [(key, columns)] = cache_rows(listed.stdout).items()
        assert columns[2:] == ["ok", "-"], listed.stdout  # as imported, no container uses it
        verified = as_user([*stage, "verify", *options, *user_args])
        assert verified.returncode == 0, verified.stdout + verified.stderr
    cache = private_scratch / str(person.uid) / "scrun-cache" / key
    (cache / "rootfs" / "etc" / "hostname").write_text("changed\n")
    verified = person.sh(shlex.join([*stage, "verify", *options]))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"scrun-stage: error: changed after their import: {key}" in verified.stderr
    for as_user in (as_root, as_person):
        pruned = as_user([*stage, "prune", *options])
        assert pruned.returncode == 0, pruned.stderr
        assert pruned.stdout.startswith("removed  "), pruned.stdout
    for uid in (os.getuid(), person.uid):
        left = private_scratch / str(uid) / "scrun-cache"
        names = [p.name for p in left.iterdir() if not p.name.startswith(".")]  # kernel check's
        assert [name for name in names if not name.endswith(".lock")] == []


def node_rows(text: str) -> dict[str, dict[str, list[str]]]:
    """`cache list`'s tables by what they list (`n1` for n1's, `scratch`): key → columns
    (size, last use, state, users); `none` for a cache that has none."""
    tables: dict[str, dict[str, list[str]]] = {}
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("cache "):
            label = line.split()[1].rstrip(":")
            where = label.split(":")[0] if ":" in label else "scratch"
            rows = tables.setdefault(where, {})
            if line.endswith(": none"):
                rows["none"] = []
        elif not line.startswith("KEY "):
            row = re.split(r"\s{2,}", line)
            rows[row[0]] = row[1:]
    return tables


def test_the_nodes_copies_listed_verified_and_pruned(
    cluster: Cluster,
    private_staging: tuple[Path, str],
    site_runtime: Callable[..., SiteRuntime],
    no_leftovers: Callable[..., None],
) -> None:
    """node-local.lua's copies of an image on the nodes: root's container on n1, a test
    user's on both nodes. `scrun-stage cache --nodes all` lists them beside the scratch's (as
    the user, and as root naming the user; in a job of its own, and in a job of the caller's),
    verify names a node's copy changed after it was made, prune removes what no container
    uses and keeps the copy a running container uses, until it has ended."""
    scratch, node_local = private_staging
    site = site_runtime(with_private_staging("node-local", private_staging, 3))
    person = pick_users(cluster.exports, cluster.slurm_conf)[0]
    done = site.podman("run", "--rm", "-e", "SCRUN_JOB_NODELIST=n1", IMAGE, "true")
    assert done.returncode == 0, done.stderr
    env = user_site(person, site)
    done = person.podman("run", "--rm", "-e", "SCRUN_JOB_NUM_NODES=2", IMAGE, "true", env=env)
    assert done.returncode == 0, done.stderr
    stage = [str(SCRUN_STAGE), "cache"]
    options = ["--scratch", str(scratch), "--node-local", node_local, "--nodes", "all"]

    def as_person(*args: str) -> subprocess.CompletedProcess[str]:
        return person.sh(shlex.join([*stage, *args, *options]))

    def as_root(*args: str) -> subprocess.CompletedProcess[str]:
        return cluster.run([*stage, *args, *options], timeout=120)

    listed = as_root("list")
    assert listed.returncode == 0, listed.stderr
    tables = node_rows(listed.stdout)
    [key] = tables["scratch"]
    assert tables == {"scratch": {key: ANY}, "n1": {key: ANY}, "n2": {"none": []}}, listed.stdout
    [key] = node_rows(as_person("list").stdout)["scratch"]  # the user's image: its own key
    held = cluster.run(["salloc", "--no-shell", "-N2", "-J", "scrun-stage-test"], timeout=60)
    job = re.search(r"Granted job allocation (\d+)", held.stderr)
    assert job, held.stderr
    try:
        for listed in (
            as_person("list"),
            as_root("list", "--user", person.name),
            as_root("list", "--user", person.name, "--job-id", job.group(1)),
        ):
            assert listed.returncode == 0, listed.stderr
            tables = node_rows(listed.stdout)
            assert set(tables) == {"scratch", "n1", "n2"}, listed.stdout
            assert all(list(rows) == [key] for rows in tables.values()), listed.stdout
            assert tables["n2"][key][2:] == ["ok", "-"], listed.stdout  # as copied, unused
    finally:
        cluster.run(["scancel", job.group(1)], timeout=30)
    verified = as_person("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    copy = node_roots(cluster.env)["n2"] / node_local.lstrip("/") / f"scrun-{person.uid}"
    (copy / "cache" / key / "rootfs" / "etc" / "hostname").write_text("changed\n")
    verified = as_person("verify")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"scrun-stage: error: changed after their import: {key} on n2" in verified.stderr

    # a running container of the user's on n1 uses the image there
    name = f"scrun-in-use-{uuid.uuid4().hex[:10]}"
    done = person.podman(
        "run", "-d", "--name", name, "-e", "SCRUN_JOB_NODELIST=n1", IMAGE, "sleep", "600", env=env
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        [marked] = wait_for(
            "the container's mark on n1's copy",
            lambda: list(node_cache_of(cluster, "n1", node_local, person.uid).glob("*/users/*")),
        )
        pruned = as_person("prune")
        assert pruned.returncode == 0, pruned.stderr
        lines = pruned.stdout.splitlines()
        assert any(re.fullmatch(rf"removed  {key} \(\d+ MiB\) on n2", line) for line in lines)
        assert f"in use   {key} by {marked.name} on n1" in lines, pruned.stdout
        assert f"in use   {key} by {marked.name}" in lines, pruned.stdout  # the scratch's
        assert (node_cache_of(cluster, "n1", node_local, person.uid) / key / "rootfs").is_dir()
    finally:
        person.podman("rm", "-f", name, env=env)
    assert_users_clean(person)
    for as_user in (as_person, as_root):  # (root: its own cache)
        pruned = as_user("prune")
        assert pruned.returncode == 0, pruned.stderr
    for uid in (os.getuid(), person.uid):
        for where in ("n1", "n2"):
            left = node_cache_of(cluster, where, node_local, uid)
            assert [p.name for p in left.glob("*") if not p.name.endswith(".lock")] == []


def node_cache_of(cluster: Cluster, node: str, node_local: str, uid: int) -> Path:
    """node-local.lua's cache of `uid` on `node`, as this host sees it."""
    return node_roots(cluster.env)[node] / node_local.lstrip("/") / f"scrun-{uid}" / "cache"
