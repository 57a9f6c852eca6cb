"""`scrun list` and `scrun features`: runc's output shapes, from the spool alone."""

import json
import os

import pytest
from scrun_cli.list import COLUMNS
from scrun_cli.main import main
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, Status


def add(root, container_id, created, **fields):
    spool = Spool(str(root), container_id)
    spool.create()
    state = ContainerState(container_id, f"/b/{container_id}", "/r", created=created, **fields)
    state.save(spool)
    return state


@pytest.fixture
def two(root):
    add(root, "second", "2026-01-02T00:00:00.000000Z", owner="bob")
    add(
        root,
        "first",
        "2026-01-01T00:00:00.000000Z",
        owner="alice",
        status=Status.STOPPED,
        job_id=41,
        nodes="vm,n1",
        exit_code=3,
    )
    (root / ".slurm-version").write_text("22.05.8\n")  # not a container
    os.mkdir(root / "half-removed")  # a spool dir without state: not listed


def test_quiet_lists_ids_oldest_first(root, two, capsys):
    assert main(["list", "-q"]) == 0
    assert capsys.readouterr().out == "first\nsecond\n"


def test_table_has_runcs_columns_plus_job_and_nodes(root, two, capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ID", "PID", "STATUS", "JOBID", "NODES", "BUNDLE", "CREATED", "OWNER"
    ]  # fmt: skip
    assert lines[1].split() == [
        "first", "0", "stopped", "41", "vm,n1", "/b/first", "2026-01-01T00:00:00.000000Z", "alice"
    ]  # fmt: skip
    assert lines[2].split()[:3] == ["second", "0", "creating"]
    assert lines[0].index("PID") == lines[1].index("0 ")  # columns line up


def test_json_is_a_list_of_states(root, two, capsys):
    assert main(["list", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["id"] for e in entries] == ["first", "second"]
    assert entries[0]["status"] == "stopped"
    assert entries[0]["jobId"] == 41 and entries[0]["nodes"] == "vm,n1"
    assert entries[0]["owner"] == "alice" and entries[0]["bundle"] == "/b/first"
    assert entries[1]["jobId"] is None


def test_empty_or_missing_root(root, capsys):
    assert main(["list", "--format=json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == list(COLUMNS)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["list", "--format", "yaml"], "unknown format 'yaml'"), (["list", "x"], "unexpected")],
)
def test_list_usage_errors(root, capsys, argv, needle):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_features_document(root, capsys):
    assert main(["features"]) == 0
    features = json.loads(capsys.readouterr().out)
    assert features["ociVersionMin"] == "1.0.0"
    assert "poststop" in features["hooks"]
    assert features["linux"]["mountExtensions"]["idmap"]["enabled"] is False
    annotations = features["annotations"]
    assert "checkpoint" in annotations["io.scrun.unsupported-commands"].split(",")
    assert {"exec", "pause", "resume", "ps"} <= set(annotations["io.scrun.commands"].split(","))
    assert "features" in annotations["io.scrun.commands"].split(",")
    assert all(isinstance(value, str) for value in annotations.values())
    assert "mountOptions" not in features  # the node's runtime's: unknown to scrun


# The runtime-spec's features document as Go types (specs-go/features): containerd 2 (docker
# 28's) calls `features` and decodes the answer into that struct; a field of another JSON
# type fails the decoding.
FEATURES_TYPES = {
    "ociVersionMin": str,
    "ociVersionMax": str,
    "hooks": list,
    "mountOptions": list,
    "linux": dict,
    "annotations": dict,
    "potentiallyUnsafeConfigAnnotations": list,
}


def test_features_decode_as_containerd_2_reads_them(root, capsys):
    assert main(["features"]) == 0
    out = capsys.readouterr().out
    features = json.loads(out)
    assert set(features) <= set(FEATURES_TYPES), set(features) - set(FEATURES_TYPES)
    for name, value in features.items():
        assert isinstance(value, FEATURES_TYPES[name]), (name, value)
    assert all(isinstance(hook, str) for hook in features["hooks"])
    assert features["ociVersionMin"] <= features["ociVersionMax"]
