"""scrunlib.engine_gpus and scrun-cdi: the engines' own GPU options, as the configs podman and
docker wrote them (dumped from podman 4.3/5.4/5.8 and docker 20.10/26.1/28.5 with the marker
spec and the stub hook), become a job's request or one refusal naming SCRUN_GPUS_PER_NODE;
`create` refuses before it makes anything."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import MINIMAL_CONFIG, write_bundle
from scrun_cdi import login_host
from scrun_cli.main import main
from scrunlib import bundle as bundles
from scrunlib import engine_gpus
from scrunlib.errors import InvalidInput

GUARD = engine_gpus.marker_spec("nvidia.com/gpu", 2)["containerEdits"]["hooks"][0]
# dockerd's NVIDIA driver: docker 20.10's hook (28.5's has the same path, args and env)
DOCKER_HOOK = {
    "path": "/usr/local/bin/nvidia-container-runtime-hook",
    "args": ["nvidia-container-runtime-hook", "prestart"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"],
}
# docker 20.10's own prestart hook (network), which is not the GPU option's
NETWORK_HOOK = {"path": "/proc/4242/exe", "args": ["libnetwork-setkey", "-exec-root=/x"]}


def config(env: list[str], hooks: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = copy.deepcopy(dict(MINIMAL_CONFIG))
    document["process"]["env"] = ["PATH=/bin", "HOSTNAME=c0ffee", *env]
    if hooks is not None:
        document["hooks"] = hooks
    return document


def request(document: dict[str, Any], caller: Mapping[str, str] | None = None) -> Any:
    return engine_gpus.engine_request(bundles.parse("/b", document), caller or {})


def podman(*names: str) -> dict[str, Any]:
    """What podman (or docker with CDI) writes for --device nvidia.com/gpu=NAME..."""
    env = [f"{engine_gpus.marker_variable('nvidia.com/gpu', n)}=nvidia.com/gpu={n}" for n in names]
    return config(env, {"createRuntime": [GUARD]})


def docker(devices: str | None) -> dict[str, Any]:
    """What dockerd writes for --gpus (None: docker 20.10's --gpus 0, no variable)."""
    env = [] if devices is None else [f"NVIDIA_VISIBLE_DEVICES={devices}"]
    return config(env, {"prestart": [NETWORK_HOOK, DOCKER_HOOK]})


def test_a_config_without_an_engine_gpu_option_is_left_alone() -> None:
    assert request(config(["NVIDIA_VISIBLE_DEVICES=all"], {"prestart": [NETWORK_HOOK]})) is None
    assert request(config([])) is None


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["0"], "--device nvidia.com/gpu=0 (or podman's --gpus 0) names GPUs of one host, "
                "which Slurm cannot pin on a node: ask for a count, -e SCRUN_GPUS_PER_NODE=1"),
        (["0", "1"], "--device nvidia.com/gpu=0 --device nvidia.com/gpu=1 (or podman's "
                     "--gpus 0,1) names GPUs of one host, which Slurm cannot pin on a node: ask "
                     "for a count, -e SCRUN_GPUS_PER_NODE=2"),
        (["all"], "--device nvidia.com/gpu=all (or podman's --gpus all) asks for every GPU of "
                  "one host, which Slurm cannot pin on a node: ask for a count, "
                  "-e SCRUN_GPUS_PER_NODE=N"),
    ],
)  # fmt: skip
def test_cdi_names_are_refused_naming_the_variable(names: list[str], expected: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        request(podman(*names))
    assert refused.value.message == expected


def test_a_name_of_another_kind_is_refused_without_podmans_gpus() -> None:
    env = [f"{engine_gpus.marker_variable('amd.com/gpu', '0')}=amd.com/gpu=0"]
    with pytest.raises(InvalidInput, match=r"^--device amd\.com/gpu=0 names GPUs of one host"):
        request(config(env))


@pytest.mark.parametrize(("devices", "count"), [("0", 1), ("0,1", 2), ("0,1,2,3", 4)])
def test_dockers_count_becomes_gpus_per_node_and_its_hook_and_variable_go(
    devices: str, count: int
) -> None:
    given = docker(devices)
    given["process"]["env"].insert(0, "NVIDIA_VISIBLE_DEVICES=all")  # a CUDA image's own
    kept = copy.deepcopy(given)
    new = request(given)
    assert given == kept  # the engine's config is not changed
    assert new["hooks"] == {"prestart": [NETWORK_HOOK]}
    assert new["process"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin", "HOSTNAME=c0ffee",
        f"SCRUN_GPUS_PER_NODE={count}",
    ]  # fmt: skip
    assert {k: v for k, v in new.items() if k not in ("hooks", "process")} == {
        k: v for k, v in given.items() if k not in ("hooks", "process")
    }


@pytest.mark.parametrize("devices", [None, "void"])
def test_dockers_gpus_0_drops_the_hook_and_asks_for_none(devices: str | None) -> None:
    given = docker(devices)
    new = request(given)
    assert new["hooks"] == {"prestart": [NETWORK_HOOK]}
    assert new["process"] == given["process"]


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ("all", "docker's --gpus all asks for every GPU of one host, which Slurm cannot pin on "
                "a node: ask for a count, --gpus N or -e SCRUN_GPUS_PER_NODE=N"),
        ("1", "docker's --gpus device=1 asks for GPUs of one host by their ids, which Slurm "
              "cannot pin on a node: ask for a count, --gpus N or -e SCRUN_GPUS_PER_NODE=N"),
        ("GPU-8c1e", "docker's --gpus device=GPU-8c1e asks for GPUs of one host by their ids"),
        ("0,2", "docker's --gpus device=0,2 asks for GPUs of one host by their ids"),
    ],
)  # fmt: skip
def test_dockers_all_and_ids_are_refused(devices: str, expected: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        request(docker(devices))
    assert refused.value.message.startswith(expected)


@pytest.mark.parametrize(
    ("caller", "env", "named"),
    [
        ({"SCRUN_GPUS": "1"}, [], "SCRUN_GPUS=1"),
        ({}, ["SCRUN_GPUS_PER_TASK=1"], "SCRUN_GPUS_PER_TASK=1"),
        ({"SCRUN_GRES": "gpu:1"}, [], "SCRUN_GRES=gpu:1"),
        ({"SCRUN_GPUS": "1"}, ["SCRUN_GPUS=3"], "SCRUN_GPUS=3"),  # the container's wins
    ],
)
def test_dockers_count_beside_a_scrun_gpu_variable_is_refused(
    caller: dict[str, str], env: list[str], named: str
) -> None:
    given = docker("0,1")
    given["process"]["env"][:0] = env
    with pytest.raises(InvalidInput) as refused:
        request(given, caller)
    assert refused.value.message == f"docker's --gpus 2 and {named} both ask for GPUs: give one"


def test_a_gres_that_is_not_a_gpu_goes_with_dockers_count() -> None:
    new = request(docker("0"), {"SCRUN_GRES": "tmpdisk:10"})
    assert new["process"]["env"][-1] == "SCRUN_GPUS_PER_NODE=1"


def test_the_marker_spec_gives_each_name_only_its_marker() -> None:
    spec = engine_gpus.marker_spec("nvidia.com/gpu", 3)
    assert spec["cdiVersion"] == "0.5.0"  # names that start with a digit
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert devices == {
        "all": {"env": ["SCRUN_CDI_NVIDIA_COM_GPU_ALL=nvidia.com/gpu=all"]},
        **{str(i): {"env": [f"SCRUN_CDI_NVIDIA_COM_GPU_{i}=nvidia.com/gpu={i}"]} for i in range(3)},
    }
    (guard,) = spec["containerEdits"]["hooks"]
    assert guard["hookName"] == "createRuntime" and guard["args"][-1].endswith("exit 1")


# ----------------------------------------------------------------------------- scrun create


def test_create_refuses_a_cdi_name_before_it_makes_anything(root, tmp_path, capsys) -> None:
    bundle = write_bundle(tmp_path / "b", podman("all"))
    assert main(["create", "--bundle", str(bundle), "gpu1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("scrun: error: --device nvidia.com/gpu=all") and err.count("\n") == 1
    assert not root.exists() or os.listdir(root) == []


def test_create_refuses_dockers_all_before_it_makes_anything(root, tmp_path, capsys) -> None:
    bundle = write_bundle(tmp_path / "b", docker("all"))
    assert main(["create", "--bundle", str(bundle), "gpu2"]) == 1
    assert capsys.readouterr().err.startswith("scrun: error: docker's --gpus all asks")
    assert not root.exists() or os.listdir(root) == []


def test_with_config_runs_the_new_config_from_its_file(tmp_path: Path) -> None:
    bundle = bundles.load(str(write_bundle(tmp_path / "b", docker("0"))))
    new = bundles.with_config(bundle, request(docker("0")), str(tmp_path / "run.json"))
    assert new.config_file == str(tmp_path / "run.json") and not new.own_config
    assert new.env[-1] == "SCRUN_GPUS_PER_NODE=1"
    assert json.loads((tmp_path / "run.json").read_text()) == new.config
    assert bundles.load(new.path, new.config_file).config == new.config


# ----------------------------------------------------------------------------- scrun-cdi


def test_login_spec_writes_the_marker_spec(tmp_path: Path, capsys) -> None:
    output = tmp_path / "cdi" / "scrun-gpu.json"
    output.parent.mkdir()
    argv = ["login-spec", "--count", "2", "--cdi-dir", str(output.parent), "--output", str(output)]
    assert login_host.main(argv) == 0
    assert json.loads(output.read_text()) == engine_gpus.marker_spec("nvidia.com/gpu", 2)
    assert output.stat().st_mode & 0o777 == 0o644
    assert login_host.main(argv) == 0  # again: its own file is no other spec
    assert login_host.main(["login-spec", "--kind", "amd.com/gpu", "--count", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "amd.com/gpu"


def test_login_spec_refuses_a_host_with_a_spec_of_the_kind(tmp_path: Path, capsys) -> None:
    (tmp_path / "nvidia.json").write_text(
        json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []})
    )
    output = tmp_path / "scrun-gpu.json"
    assert login_host.main(["login-spec", "--cdi-dir", str(tmp_path), "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"scrun-cdi: error: this host has a CDI spec of nvidia.com/gpu already "
        f"({tmp_path}/nvidia.json): the marker spec is for login hosts without GPUs\n"
    )
    assert not output.exists()


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["login-spec", "--count", "0"], ["login-spec", "--kind", "x'y/gpu"],
     ["login-spec", "--kind"], ["docker-hook", "--kind", "a/b"]],
)  # fmt: skip
def test_scrun_cdi_usage_errors_are_one_line(argv: list[str], capsys) -> None:
    assert login_host.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("scrun-cdi: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["login-spec", "--help"]])
def test_scrun_cdi_help_helps(argv: list[str], capsys) -> None:
    """It was a usage error (exit 2) naming no command's purpose."""
    assert login_host.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: scrun-cdi login-spec") and "marker CDI spec" in out


def test_docker_hook_is_an_executable_that_fails(tmp_path: Path) -> None:
    import subprocess

    output = tmp_path / "nvidia-container-runtime-hook"
    assert login_host.main(["docker-hook", "--output", str(output)]) == 0
    assert output.stat().st_mode & 0o777 == 0o755
    done = subprocess.run([str(output), "prestart"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "this host has no GPU" in done.stderr and "--runtime scrun" in done.stderr
