"""The unit tests' shared fixtures: an OCI bundle, and the runtime root of a scrun whose
settings are the tests' own.

A test module whose code reads more of config.json than the minimal one overrides
`bundle_config` (pytest takes a module's fixture over this file's); `bundle` stays the one
that writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from scrunlib import log

# What every reader of a bundle needs: a process to run and a root filesystem.
MINIMAL_CONFIG: Mapping[str, Any] = {
    "ociVersion": "1.0.2",
    "process": {"args": ["true"]},
    "root": {"path": "rootfs"},
}


def write_bundle(directory: Path, config: Mapping[str, Any]) -> Path:
    """`directory` made an OCI bundle: config.json holding `config`, an empty rootfs/."""
    (directory / "rootfs").mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture
def bundle_config() -> Mapping[str, Any]:
    return MINIMAL_CONFIG


@pytest.fixture
def bundle(tmp_path: Path, bundle_config: Mapping[str, Any]) -> Path:
    """tmp_path/bundle, written from `bundle_config`."""
    return write_bundle(tmp_path / "bundle", bundle_config)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """scrun's default runtime root, $XDG_RUNTIME_DIR/scrun, in tmp_path; no site config
    file and no log level from this shell's environment (SCRUN_*DEBUG)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(tmp_path / "none.toml"))
    for name in log.ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "scrun"


@pytest.fixture(autouse=True)
def anchors_in_our_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests call `scrun create` in this process, which must go on forking after the
    anchor it forked has ended: no pid namespace of its own for it (as for a caller that
    may not make one). tests/unit/test_pidns.py makes one, in a process of its own."""
    monkeypatch.setattr("scrunlib.pidns.new_for_children", lambda: False)
