"""The man page's example scrun.lua (tests/lua/seed_scrun.lua, copied verbatim) runs unmodified,
and so does Slurm 26.05's (tests/lua/man_26_05_scrun.lua: scrun(1) of slurm-client 26.05.5,
section "Example scrun.lua scripts", verbatim; it uses slurm.from_json/to_json).

Its commands run for real on this host (id, mkdir, rsync, rm): the script stages the rootfs
to /run/user/<uid>/slurm/scrun/<id>/, rewrites config.json there, and stage-out syncs the
rootfs back and removes the staged copy.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from scrunlib.lua.commands import SubprocessRunner
from scrunlib.lua.stage import StageContext, Stager

LUA = Path(__file__).resolve().parents[1] / "lua"
SEED = LUA / "seed_scrun.lua"
MAN_26_05 = LUA / "man_26_05_scrun.lua"
UID, GID = os.getuid(), os.getgid()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """The seed's fixed scratch root, /run/user/<uid>; whatever the test adds is removed."""
    base = Path(f"/run/user/{UID}")
    created = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    had_slurm_dir = (base / "slurm").exists()
    yield base
    if created:
        shutil.rmtree(base, ignore_errors=True)
    elif not had_slurm_dir:
        shutil.rmtree(base / "slurm", ignore_errors=True)


@pytest.fixture
def bundle_config(tmp_path: Path) -> Mapping[str, object]:
    """The bundle (conftest's `bundle`) as podman writes it, with /etc/hosts bind-mounted."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    return {
        "ociVersion": "1.0.2",
        "process": {
            "args": ["sh"],
            "env": ["PATH=/usr/bin:/bin"],
            "user": {"uid": 0, "gid": 0, "additionalGids": [10, 11]},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        },
        "root": {"path": "rootfs"},
        "annotations": {},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "uid=5", "gid=5"],
            },
            {
                "destination": "/etc/hosts",
                "type": "bind",
                "source": str(hosts),
                "options": ["rbind"],
            },
        ],
        "linux": {"namespaces": [{"type": "pid"}], "cgroupsPath": "/machine/x", "sysctl": {}},
        "hooks": {"prestart": [{"path": "/usr/bin/true"}]},
    }


@pytest.mark.parametrize("script", [SEED, MAN_26_05], ids=["seed", "slurm-26.05-man-page"])
def test_seed_script_stages_in_and_out(scratch: Path, bundle: Path, script: Path) -> None:
    (bundle / "rootfs" / "etc").mkdir()
    (bundle / "rootfs" / "etc" / "hello").write_text("hello\n")  # the image's file, staged
    container_id = f"seed-{uuid.uuid4().hex[:12]}"
    staged_dir = scratch / "slurm" / "scrun" / container_id
    stager = Stager.load(str(script), runner=SubprocessRunner(), cluster_name="test")
    assert [record.message for record in stager.load_logs] == ["initialized scrun.lua"]
    ctx = StageContext(
        container_id=container_id,
        bundle=str(bundle),
        spool_dir=f"/run/scrun/{container_id}/",
        config_file=str(bundle / "config.json"),
        job_id=4242,
        user_id=UID,
        group_id=GID,
        job_env=["PATH=/usr/bin:/bin", "SLURM_JOB_ID=4242", f"SCRUN_CONTAINER_ID={container_id}"],
        root_path=str(bundle / "rootfs"),
        orig_bundle=str(bundle),
    )
    try:
        result = stager.stage_in(ctx)
        assert result.ok, result.message
        assert result.bundle == f"/run/user/{UID}/slurm/scrun//{container_id}/"
        assert result.root_path == f"/run/user/{UID}/slurm/scrun//{container_id}/rootfs/"
        assert result.commands[0].script == f"id -un {UID}"
        assert all(command.status == 0 for command in result.commands), result.commands
        assert (staged_dir / "rootfs" / "etc" / "hello").read_text() == "hello\n"
        assert (staged_dir / "rootfs" / "etc" / "hosts").read_text() == "127.0.0.1 localhost\n"
        assert [r.message for r in result.logs][-1] == f"created: {result.bundle}config.json"

        config = json.loads((staged_dir / "config.json").read_text())
        assert config["root"]["path"] == result.root_path
        assert config["ociVersion"] == "1.0.0"
        assert {"type": "user"} in config["linux"]["namespaces"]
        assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": UID, "size": 1}]
        assert config["linux"]["gidMappings"] == [{"containerID": 0, "hostID": GID, "size": 1}]
        assert "cgroupsPath" not in config["linux"]
        assert "additionalGids" not in config["process"]["user"]
        assert "rlimits" not in config["process"]
        assert config["hooks"] == {} and config["annotations"] == {}
        assert config["linux"]["sysctl"] == {}
        assert [m["destination"] for m in config["mounts"]] == ["/proc", "/tmp"]
        assert config["mounts"][1]["options"] == ["nosuid"]
        assert config["process"]["env"] == ["PATH=/usr/bin:/bin", *ctx.job_env]

        (staged_dir / "rootfs" / "etc" / "written-in-job").write_text("result\n")
        out = stager.stage_out(ctx)
        assert out.ok, out.message
        assert [c.status for c in out.commands] == [0, 0]
        assert (bundle / "rootfs" / "etc" / "written-in-job").read_text() == "result\n"
        assert not staged_dir.exists()
    finally:
        shutil.rmtree(staged_dir, ignore_errors=True)


def test_seed_stage_out_skips_when_nothing_was_staged(bundle: Path) -> None:
    stager = Stager.load(str(SEED), runner=SubprocessRunner())
    ctx = StageContext(
        container_id="unstaged",
        bundle=str(bundle),
        spool_dir="/run/scrun/unstaged/",
        config_file=str(bundle / "config.json"),
        job_id=1,
        user_id=UID,
        group_id=GID,
        job_env=[],
        root_path=str(bundle / "rootfs"),
        orig_bundle=str(bundle),
    )
    result = stager.stage_out(ctx)
    assert result.ok and result.commands == []
    assert result.logs[-1].message == f"skipping stage_out as bundle=orig_bundle={bundle}"
    assert (bundle / "config.json").exists()
