"""Slurm release numbers."""

import pytest
from scrunlib.errors import SlurmError
from scrunlib.slurm_version import (
    parse_version,
    runtime_makes_terminal,
    supports_container_id,
    version_text,
)


def test_version_text():
    assert version_text((23, 2, 0)) == "23.02"
    assert version_text((22, 5, 8)) == "22.05.8"


def test_parse_version_and_container_ids():
    assert parse_version("slurm 23.02.7\n") == (23, 2, 7)
    with pytest.raises(SlurmError, match="cannot tell the Slurm version"):
        parse_version("slurm-wlm")
    assert not supports_container_id((22, 5, 8)) and supports_container_id((23, 2, 0))


def test_the_runtime_makes_the_terminal_from_23_02():
    assert not runtime_makes_terminal((22, 5, 8))
    assert runtime_makes_terminal((23, 2, 0)) and runtime_makes_terminal((24, 11, 5))
