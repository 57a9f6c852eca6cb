"""slurm.time_str2mins against Slurm's time-limit syntax: valid forms and their minutes,
and the forms Slurm rejects."""

from __future__ import annotations

import pytest
from scrunlib.timestr import INVALID, UNLIMITED, time_str2mins

SPEC_TABLE = [
    ("90", 90),
    ("0", 0),
    ("1:30", 2),  # 1 min 30 s, rounded up
    ("1:00", 1),
    ("0:59", 1),
    ("2:00:00", 120),
    ("1:00:30", 61),
    ("1-0", 1440),
    ("1-2", 1560),
    ("1-2:30", 1590),
    ("1-2:30:01", 1591),
    ("1-", 1440),
    ("INFINITE", UNLIMITED),
    ("unlimited", UNLIMITED),
    ("UNLIMITED", UNLIMITED),
    ("Infinite", UNLIMITED),
    ("-1", UNLIMITED),
    ("abc", INVALID),
    ("1:", INVALID),
    ("1:2:3:4", INVALID),
    ("1-2-3", INVALID),
    ("1:2-3", INVALID),
    ("", INVALID),
    (None, INVALID),
    # Slurm's validity rules: how many numbers each mix of dashes and colons needs
    ("1-2:3", 1563),  # one colon with a dash needs 3 numbers: has them
    ("1-:3", INVALID),  # only 2 numbers
    ("1-2::", INVALID),  # two colons with a dash need 4 numbers
    ("::1", INVALID),  # two colons without a dash need 3 numbers
    (":5", INVALID),  # one colon needs 2 numbers
    (" 90", INVALID),
    ("9O", INVALID),
    ("0:0:1", 1),
    ("10-0:0:0", 14400),
]


@pytest.mark.parametrize(("text", "minutes"), SPEC_TABLE)
def test_time_str2mins(text: str | None, minutes: int) -> None:
    assert time_str2mins(text) == minutes


def test_constants() -> None:
    assert (UNLIMITED, INVALID) == (-1, -2)


def test_negative_count_is_negative() -> None:
    assert time_str2mins("-5") < 0
