"""A real workflow runner through scrun: cwltool, the Common Workflow Language's reference
runner, with `--podman --parallel`, as each test user (rootless podman through scrun).

cwltool runs every step with `podman run --userns=keep-id --user=UID:GID --read-only
--net=none`, its working and temporary directories as bind mounts of directories it makes
under the login host's /tmp, and the inputs as read-only bind mounts: every step is a Slurm
job, staged to a node that sees none of that, and what it writes must come back. A scatter
of four steps and a gather of their outputs.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from users import User, assert_users_clean, pick_users

if TYPE_CHECKING:
    from conftest import Cluster

STEP = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement: {dockerPull: localhost/busybox}
baseCommand: [sh, -c]
arguments: ["tr a-z A-Z < $0 > upper.txt", $(inputs.infile.path)]
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


@pytest.fixture
def workflow(no_leftovers: Callable[..., None]) -> Iterator[Callable[[User], Path]]:
    """A directory of the user's on the login host's own disk with the workflow, its
    inputs and a containers.conf whose default runtime is scrun (cwltool calls plain
    `podman run`)."""
    made: list[Path] = []

    def make(person: User) -> Path:
        work = Path(f"/var/tmp/scrun-cwl-{person.name}-{uuid.uuid4().hex[:8]}")
        made.append(work)
        work.mkdir()
        for name, text in (("step.cwl", STEP), ("gather.cwl", GATHER), ("wf.cwl", WORKFLOW)):
            (work / name).write_text(text)
        files = []
        for i in range(STEPS):
            (work / f"in{i}.txt").write_text(f"part {i}\n")
            files.append(f"  - {{class: File, path: in{i}.txt}}\n")
        (work / "job.yml").write_text("files:\n" + "".join(files))
        own = (person.home / ".config/containers/containers.conf").read_text()
        assert "\n[engine]\n" in own, own
        conf = own.replace("\n[engine]\n", '\n[engine]\nruntime = "scrun"\n')
        (work / "containers.conf").write_text(conf)
        shutil.chown(work, person.uid, person.gid)
        for path in work.iterdir():
            shutil.chown(path, person.uid, person.gid)
        return work

    yield make
    for work in made:
        shutil.rmtree(work, ignore_errors=True)


def test_cwltool_runs_a_scatter_and_a_gather_through_scrun(
    cluster: Cluster, cwltool: Path, workflow: Callable[[User], Path]
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
        expected = "".join(f"PART {i}\n" for i in range(STEPS)) + f"{person.uid}\n"
        assert result.read_text() == expected, done.stderr[-3000:]
        assert result.stat().st_uid == person.uid
        assert_users_clean(person)
