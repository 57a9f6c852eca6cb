"""Slurm's time-limit syntax → minutes, in pure Python: scrun.lua's `slurm.time_str2mins`,
and the check of SCRUN_TIMELIMIT and the other time options (scrunlib.job_options).

Not part of the Lua package: the anchor's option checks use it without loading Lua. The
rules are those of Slurm's `time_str2mins` (src/common/parse_time.c), including its odd
corners (`"1-"` is one day).
"""

from __future__ import annotations

UNLIMITED = -1  # "-1", "INFINITE", "UNLIMITED"
INVALID = -2  # NO_VAL as a signed 32-bit number: what Slurm returns for garbage

_UNLIMITED_WORDS = frozenset({"-1", "infinite", "unlimited"})
_ALLOWED = frozenset("0123456789:-")


def time_str2mins(text: str | None) -> int:
    """Minutes in `text` (`D-H[:M[:S]]`, `H:M:S`, `M`, `M:S`), seconds rounded up.

    Returns -1 for the unlimited spellings and -2 for anything Slurm would reject.
    """
    if not text:
        return INVALID
    if text.lower() in _UNLIMITED_WORDS:
        return UNLIMITED
    if not _valid(text):
        return INVALID
    days_part, dash, clock = text.rpartition("-") if "-" in text else ("", "", text)
    if dash and not days_part:
        # "-5": passes Slurm's checks and means a negative count; nothing uses it.
        return -int(clock or 0)
    fields = [int(part) if part else 0 for part in clock.split(":")]
    if dash:
        days = int(days_part)
        hours, minutes, seconds = [*fields, 0, 0][:3]
    else:
        days = 0
        if len(fields) == 3:
            hours, minutes, seconds = fields
        else:
            hours, (minutes, seconds) = 0, [*fields, 0][:2]
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -(-total // 60)  # round up to whole minutes


def _valid(text: str) -> bool:
    """Slurm's up-front check: which characters, how many separators, how many numbers."""
    if not _ALLOWED.issuperset(text) or not any(ch.isdigit() for ch in text):
        return False
    dashes, colons = text.count("-"), text.count(":")
    if dashes > 1 or colons > 2:
        return False
    if dashes and colons and text.index("-") > text.index(":"):
        return False
    numbers = sum(1 for run in text.replace("-", ":").split(":") if run)  # runs of digits
    needed = {(1, 1): 3, (1, 2): 4, (0, 1): 2, (0, 2): 3}.get((dashes, colons), 1)
    return numbers >= needed
