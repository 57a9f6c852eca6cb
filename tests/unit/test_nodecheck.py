"""scrunlib.nodecheck: the check a failed launch runs on the job's nodes, and its verdict."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from scrunlib import nodecheck


def run_check(script: str, node: str = "n7") -> str:
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"PATH": os.environ["PATH"], "SLURMD_NODENAME": node},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_a_node_that_sees_everything_prints_nothing(bundle: Path) -> None:
    script = nodecheck.check_script(str(bundle), str(bundle / "rootfs"), runtime_dir=False)
    assert run_check(script) == ""
    assert nodecheck.diagnosis("", str(bundle), str(bundle / "rootfs")) is None


def test_an_invisible_bundle_is_named_with_its_node_and_the_fix(tmp_path: Path) -> None:
    bundle = tmp_path / "only on the login host's"  # a space: the path is quoted
    script = nodecheck.check_script(str(bundle), str(bundle / "rootfs"), runtime_dir=False)
    output = run_check(script)
    assert output.split() == ["n7", "bundle", "n7", "rootfs"]
    message = nodecheck.diagnosis(output, str(bundle), str(bundle / "rootfs"))
    assert message is not None and "\n" not in message
    assert message.startswith(f"node n7 cannot read the container's bundle {bundle}: ")
    assert "scrun.lua" in message and "share" in message


def test_an_invisible_rootfs_is_named(bundle: Path, tmp_path: Path) -> None:
    rootfs = tmp_path / "overlay" / "merged"
    script = nodecheck.check_script(str(bundle), str(rootfs), runtime_dir=False)
    message = nodecheck.diagnosis(run_check(script), str(bundle), str(rootfs))
    assert message is not None
    assert message.startswith(f"node n7 cannot read the container's root filesystem {rootfs}")


def test_a_missing_runtime_dir_is_checked_only_when_oci_conf_uses_it(
    bundle: Path, tmp_path: Path
) -> None:
    rootfs = str(bundle / "rootfs")
    assert "/run/user/" not in nodecheck.check_script(str(bundle), rootfs, runtime_dir=False)
    # the node's /run/user, moved where this test decides whether it exists
    node_run_user = tmp_path / "node-run-user"
    node_run_user.mkdir()
    script = nodecheck.check_script(str(bundle), rootfs, runtime_dir=True)
    assert "/run/user/" in script
    script = script.replace("/run/user/", f"{node_run_user}/")
    expected_dir = f"{node_run_user}/{os.getuid()}"
    assert run_check(script).split() == ["n7", "runtime-dir", expected_dir]
    os.mkdir(expected_dir)
    assert run_check(script) == ""


def test_the_runtime_dir_verdict_names_each_node_once() -> None:
    output = "n2 runtime-dir /run/user/1000\nn1 runtime-dir /run/user/1000\n"
    message = nodecheck.diagnosis(output, "/b", "/b/rootfs")
    assert message == (
        "nodes n1,n2 have no /run/user/1000, the user's runtime directory, where oci.conf "
        "keeps the containers: the nodes must make it (loginctl enable-linger, or a tmpfiles "
        "or PAM rule)"
    )


def test_the_bundle_comes_before_the_runtime_dir() -> None:
    output = "n1 runtime-dir /run/user/1000\nn2 bundle\n"
    message = nodecheck.diagnosis(output, "/b", "/b/rootfs")
    assert message is not None and message.startswith("node n2 cannot read the container's bundle")


@pytest.mark.parametrize(
    ("oci_conf", "uses"),
    [
        ('RunTimeRun="crun --root=/run/user/$(id -u %u)/crun run --bundle %b %n"', True),
        ('RunTimeRun="runc --root=/var/run/slurm-runc run --bundle %b %n"', False),
    ],
)
def test_uses_runtime_dir(oci_conf: str, uses: bool) -> None:
    assert nodecheck.uses_runtime_dir(oci_conf) is uses
