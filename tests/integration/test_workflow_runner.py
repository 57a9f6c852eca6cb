"""A real workflow runner through scrun: cwltool, the Common Workflow Language's reference
runner, with `--podman --parallel`, as each test user (rootless podman through scrun).

cwltool runs every step with `podman run --userns=keep-id --user=UID:GID --read-only
--net=none`, its working and temporary directories as bind mounts of directories it makes
under the login host's /tmp, and the inputs as read-only bind mounts: every step is a Slurm
job, staged to a node that sees none of that, and what it writes must come back. A scatter
of four steps and a gather of their outputs, as each test user; a scatter of a hundred (more
than the cluster runs at once: most steps wait in the queue) with the work directory in the
user's home and cwltool's own directories in the shared scratch, where a site puts them;
a failing step's exit code; and cwltool with docker, as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from users import User, assert_users_clean, pick_users

if TYPE_CHECKING:
    from conftest import Cluster, Docker

STEP = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement: {dockerPull: localhost/busybox}
baseCommand: [sh, -c]
arguments:
  - tr a-z A-Z < $0 > upper.txt; test -n "$SLURM_JOB_ID" || echo not a Slurm job >> upper.txt
  - $(inputs.infile.path)
inputs: {infile: File}
outputs:
  upper: {type: File, outputBinding: {glob: upper.txt}}
"""
GATHER = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement: {dockerPull: localhost/busybox}
baseCommand: [sh, -c]
arguments: ["cat \\"$@\\" > all.txt; id -u >> all.txt", sh]
inputs:
  parts: {type: "File[]", inputBinding: {position: 1}}
outputs:
  all: {type: File, outputBinding: {glob: all.txt}}
"""
WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
requirements: {ScatterFeatureRequirement: {}}
inputs: {files: "File[]"}
outputs:
  all: {type: File, outputSource: gather/all}
steps:
  upper: {run: step.cwl, scatter: infile, in: {infile: files}, out: [upper]}
  gather: {run: gather.cwl, in: {parts: upper/upper}, out: [all]}
"""
STEPS = 4


@pytest.fixture(scope="session")
def cwltool(cluster: Cluster) -> Path:
    """cwltool in a virtual environment of its own, made once (kept in the cluster's dir)."""
    venv = cluster.dir / "cwltool"
    program = venv / "bin" / "cwltool"
    if not program.exists():
        shutil.rmtree(venv, ignore_errors=True)
        made = subprocess.run(
            ["/usr/bin/python3", "-m", "venv", str(venv)], capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
        installed = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "cwltool"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert installed.returncode == 0, installed.stderr
    return program


EXIT_3 = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement: {dockerPull: localhost/busybox}
baseCommand: [sh, -c, "exit 3"]
inputs: {}
outputs:
  code: {type: int, outputBinding: {outputEval: $(runtime.exitCode)}}
"""
MANY_STEPS = 100  # the cluster runs 16 at once: most wait in the queue


def write_workflow(work: Path, steps: int) -> None:
    """The scatter-and-gather workflow over `steps` input files, in `work`."""
    for name, text in (("step.cwl", STEP), ("gather.cwl", GATHER), ("wf.cwl", WORKFLOW)):
        (work / name).write_text(text)
    files = []
    for i in range(steps):
        (work / f"in{i}.txt").write_text(f"part {i}\n")
        files.append(f"  - {{class: File, path: in{i}.txt}}\n")
    (work / "job.yml").write_text("files:\n" + "".join(files))


def gathered(steps: int, uid: int) -> str:
    """What the gather step writes: every step's output in order, then its user's id."""
    return "".join(f"PART {i}\n" for i in range(steps)) + f"{uid}\n"


@pytest.fixture
def workflow(no_leftovers: Callable[..., None]) -> Iterator[Callable[..., Path]]:
    """A directory of the user's (in `parent`: by default the login host's own disk) with
    the workflow over `steps` inputs and a containers.conf whose default runtime is scrun
    (cwltool calls plain `podman run`)."""
    made: list[Path] = []

    def make(person: User, steps: int = STEPS, parent: Path = Path("/var/tmp")) -> Path:
        work = parent / f"scrun-cwl-{person.name}-{uuid.uuid4().hex[:8]}"
        made.append(work)
        work.mkdir()
        write_workflow(work, steps)
        (work / "exit3.cwl").write_text(EXIT_3)
        (work / "exit3-ok.cwl").write_text(EXIT_3 + "successCodes: [3]\n")
        own = (person.home / ".config/containers/containers.conf").read_text()
        assert "\n[engine]\n" in own, own
        conf = own.replace("\n[engine]\n", '\n[engine]\nruntime = "scrun"\n')
        (work / "containers.conf").write_text(conf)
        for path in (work, *work.iterdir()):
            shutil.chown(path, person.uid, person.gid)
        return work

    yield make
    for work in made:
        shutil.rmtree(work, ignore_errors=True)


def test_cwltool_runs_a_scatter_and_a_gather_through_scrun(
    cluster: Cluster, cwltool: Path, workflow: Callable[..., Path]
) -> None:
    for person in pick_users(cluster.exports, cluster.slurm_conf):
        work = workflow(person)
        done = person.sh(
            f"cd {work} && {cwltool} --podman --parallel --outdir out wf.cwl job.yml",
            env={"CONTAINERS_CONF": str(work / "containers.conf")},
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = work / "out" / "all.txt"
        assert result.read_text() == gathered(STEPS, person.uid), done.stderr[-3000:]
        assert result.stat().st_uid == person.uid
        assert_users_clean(person)


def test_a_scatter_of_a_hundred_runs_from_home_and_the_shared_scratch(
    cluster: Cluster, cwltool: Path, workflow: Callable[..., Path]
) -> None:
    """More steps than the cluster runs at once: most of the hundred jobs wait in the queue
    (their anchors share one reading of it). The work directory is in the user's home,
    cwltool's temporary and output directories in the shared scratch, and each step's
    container id is written where cwltool asks (`--cidfile-dir`; podman 4 keeps the files)."""
    person, _ = pick_users(cluster.exports, cluster.slurm_conf)
    work = workflow(person, MANY_STEPS, person.home)
    scratch = Path(cluster.exports["SCRUN_SHARED_DIR"]) / f"cwl-{work.name}"
    (scratch / "cids").mkdir(parents=True)
    for path in (scratch, scratch / "cids"):
        shutil.chown(path, person.uid, person.gid)
    try:
        done = person.sh(
            f"cd {work} && {cwltool} --podman --parallel --outdir out"
            f" --tmpdir-prefix {scratch}/tmp- --tmp-outdir-prefix {scratch}/out-"
            f" --cidfile-dir {scratch}/cids wf.cwl job.yml",
            env={"CONTAINERS_CONF": str(work / "containers.conf")},
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert (work / "out" / "all.txt").read_text() == gathered(MANY_STEPS, person.uid)
        ids = {path.read_text().strip() for path in (scratch / "cids").iterdir()}
        version = person.podman("version", "--format", "{{.Client.Version}}").stdout.strip()
        if int(version.split(".")[0]) >= 5:  # podman 5 removes it with the container (--rm)
            assert not ids, ids
        else:
            assert len(ids) == MANY_STEPS + 1, ids  # a container of its own for each step
            assert all(len(cid) == 64 and int(cid, 16) >= 0 for cid in ids), ids
        assert_users_clean(person, timeout=60)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_failing_step_reports_its_exit_code(
    cluster: Cluster, cwltool: Path, workflow: Callable[..., Path]
) -> None:
    person, _ = pick_users(cluster.exports, cluster.slurm_conf)
    work = workflow(person)
    env = {"CONTAINERS_CONF": str(work / "containers.conf")}
    failed = person.sh(f"cd {work} && {cwltool} --podman exit3.cwl", env=env, timeout=300)
    assert failed.returncode != 0
    assert "exited with status: 3" in failed.stderr, failed.stderr[-3000:]
    assert "permanentFail" in failed.stderr
    # a tool for which 3 is success gets the code as its output
    done = person.sh(f"cd {work} && {cwltool} --podman exit3-ok.cwl", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"code": 3' in done.stdout, done.stdout
    assert_users_clean(person)


DOCKER_WITH_SCRUN = """\
#!/bin/sh
# what a site's dockerd does with `"default-runtime": "scrun"`: every `docker run` on scrun
if [ "$1" = run ]; then shift; exec {docker} run --runtime scrun "$@"; fi
exec {docker} "$@"
"""


def test_cwltool_with_docker_as_root(
    cluster: Cluster, cwltool: Path, docker: Docker, no_leftovers: Callable[..., None]
) -> None:
    """cwltool's default engine, docker, as root: the private dockerd runs scrun for
    `docker run` (the wrapper stands for its default runtime); all in the shared scratch."""
    work = Path(cluster.exports["SCRUN_SHARED_DIR"]) / f"scrun-cwl-root-{uuid.uuid4().hex[:8]}"
    (work / "bin").mkdir(parents=True)
    try:
        write_workflow(work, STEPS)
        wrapper = work / "bin" / "docker"
        wrapper.write_text(DOCKER_WITH_SCRUN.format(docker=f"/usr/bin/docker --host {docker.host}"))
        wrapper.chmod(0o755)
        done = subprocess.run(
            [
                str(cwltool),
                "--parallel",
                "--outdir",
                "out",
                "--tmpdir-prefix",
                f"{work}/tmp-",
                "--tmp-outdir-prefix",
                f"{work}/out-",
                "wf.cwl",
                "job.yml",
            ],
            cwd=work,
            env={**docker.env, "PATH": f"{work / 'bin'}:{os.environ['PATH']}"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert (work / "out" / "all.txt").read_text() == gathered(STEPS, 0)
        no_leftovers()
        left = [d for d in docker.runtime_root.glob("*") if d.is_dir()]
        assert not left, left
    finally:
        shutil.rmtree(work, ignore_errors=True)
