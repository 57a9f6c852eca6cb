"""The engines' --memory and --cpus become the job's size (SCRUN_MEM_PER_NODE,
SCRUN_CPUS_PER_TASK in the container's environment), unless a SCRUN_* variable sizes it."""

from __future__ import annotations

from typing import Any

import pytest
from scrunlib.engine_resources import engine_request


def config(resources: Any, env: list[str] | None = None) -> dict[str, Any]:
    return {
        "process": {"args": ["true"], "env": env if env is not None else ["PATH=/bin"]},
        "root": {"path": "rootfs"},
        "linux": {"resources": resources},
    }


def test_memory_and_cpus_become_the_jobs_size() -> None:
    """podman's and docker's `--memory 64m --cpus 1.5`: 64 MiB, and 2 CPUs (rounded up)."""
    given = config({"memory": {"limit": 64 << 20}, "cpu": {"quota": 150000, "period": 100000}})
    sized = engine_request(given, {})
    assert sized is not None
    assert sized["process"]["env"] == [
        "PATH=/bin",
        "SCRUN_MEM_PER_NODE=64M",
        "SCRUN_CPUS_PER_TASK=2",
    ]
    assert sized["linux"] == given["linux"] and given["process"]["env"] == ["PATH=/bin"]


def test_a_memory_limit_is_rounded_up_to_whole_mebibytes() -> None:
    sized = engine_request(config({"memory": {"limit": (5 << 20) + 1}}), {})
    assert sized is not None and sized["process"]["env"][-1] == "SCRUN_MEM_PER_NODE=6M"


@pytest.mark.parametrize(
    "resources",
    [
        {},
        {"pids": {"limit": 2048}},  # podman's default
        {"memory": {"limit": -1}},
        {"memory": {"limit": 0}, "cpu": {"quota": -1, "period": 100000}},
        {"memory": {"limit": "64m"}, "cpu": {"quota": True}},
        {"memory": [], "cpu": "2"},
        {"cpu": {"shares": 2048, "cpus": "0-3"}},  # not Slurm's to give
    ],
)
def test_no_limit_changes_nothing(resources: Any) -> None:
    assert engine_request(config(resources), {}) is None


def test_a_config_without_linux_changes_nothing() -> None:
    assert engine_request({"process": {"args": ["true"]}, "root": {"path": "r"}}, {}) is None


@pytest.mark.parametrize(
    ("caller", "container", "expected"),
    [
        ({"SCRUN_MEM_PER_NODE": "1G"}, [], ["SCRUN_CPUS_PER_TASK=2"]),
        ({}, ["SCRUN_MEM_PER_CPU=100M"], ["SCRUN_MEM_PER_CPU=100M", "SCRUN_CPUS_PER_TASK=2"]),
        ({"SCRUN_CPUS_PER_TASK": "4"}, [], ["SCRUN_MEM_PER_NODE=64M"]),
        (
            {"SCRUN_CPUS_PER_TASK": "4"},
            ["SCRUN_CPUS_PER_TASK="],
            ["SCRUN_CPUS_PER_TASK=", "SCRUN_MEM_PER_NODE=64M", "SCRUN_CPUS_PER_TASK=2"],
        ),
    ],
)
def test_a_scrun_variable_sizing_the_same_wins(
    caller: dict[str, str], container: list[str], expected: list[str]
) -> None:
    """The caller's or the container's own (`-e`) SCRUN_* sizing leaves the engine's limit
    out; the container's empty value unsets the caller's."""
    given = config({"memory": {"limit": 64 << 20}, "cpu": {"quota": 200000}}, container)
    sized = engine_request(given, caller)
    assert sized is not None and sized["process"]["env"] == expected


def test_nothing_left_to_add_changes_nothing() -> None:
    given = config({"memory": {"limit": 64 << 20}}, ["SCRUN_MEM_PER_NODE=2G"])
    assert engine_request(given, {}) is None
