"""The kinds of value a SCRUN_* job variable takes (scrunlib.job_options): what the
generated docs call each, and how a value is checked before it goes on a Slurm command line.

A check returns the value to pass on ("" = the option without a value), None when the
option must not be given at all (a flag set to "no"), or raises ValueError with the reason,
phrased to follow "invalid NAME='value': ".
"""

from __future__ import annotations

from scrunlib.log import LEVELS
from scrunlib.signals import SIGRTMAX
from scrunlib.timestr import INVALID, UNLIMITED, time_str2mins

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_INT_MAX = 2**31 - 1  # Slurm keeps these counts in a C int
_MAX_SIGNAL_DELAY = 0xFFFF  # --signal's @secs is a uint16
# Names Slurm's sig_name2num knows (with or without "SIG", any case); numbers work as well.
_SIGNAL_NAMES = frozenset(
    [
        "HUP",
        "INT",
        "QUIT",
        "ABRT",
        "KILL",
        "ALRM",
        "TERM",
        "USR1",
        "USR2",
        "URG",
        "CONT",
        "STOP",
        "TSTP",
        "TTIN",
        "TTOU",
        "XCPU",
    ]
)
_PROFILE_TYPES = frozenset({"energy", "task", "lustre", "network"})
_ACCTG_TYPES = frozenset({"task", "energy", "network", "filesystem"})


class Kind:
    """A type of value: what the docs call it and how a value is checked."""

    __slots__ = ("accepts", "check", "name")

    def __init__(self, name: str, accepts: str, check: Callable[[str], str | None]) -> None:
        self.name = name
        self.accepts = accepts  # markdown, for the "value kinds" table of the docs
        self.check = check


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    if any(ord(char) < 0x20 or char == "\x7f" for char in value):
        raise ValueError("must not contain control characters")
    return value


def _word(value: str) -> str:
    if any(char.isspace() for char in _text(value)):
        raise ValueError("must not contain spaces")
    return value


def _name_list(value: str) -> str:
    if "" in _word(value).split(","):
        raise ValueError("has an empty item in its comma-separated list")
    return value


def digits(value: str) -> int | None:
    """The number in `value` if it is plain decimal digits (no sign, no spaces), else None."""
    return int(value) if value.isascii() and value.isdigit() else None


def _at_least(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str:
        number = digits(value)
        if number is None or number < minimum:
            raise ValueError(f"must be an integer ≥ {minimum}")
        if number > _INT_MAX:
            raise ValueError(f"must be at most {_INT_MAX}")
        return str(number)

    return check


def _time(value: str) -> str:
    minutes = time_str2mins(value)
    if minutes == INVALID or (minutes < 0 and minutes != UNLIMITED):
        raise ValueError("is not a Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S or INFINITE)")
    return value


def _memory(value: str) -> str:
    import re

    if not re.fullmatch(r"[0-9]+[KMGTkmgt]?", value):
        raise ValueError("is not a size: a whole number with an optional K, M, G or T")
    return value


def _nodes(value: str) -> str:
    import re

    match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", value)
    if not match:
        raise ValueError("is not a node count: min or min-max")
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if low < 1:
        raise ValueError("asks for no nodes: a container needs at least one")
    if high < low:
        raise ValueError("has a maximum below its minimum")
    if high > _INT_MAX:
        raise ValueError(f"must be at most {_INT_MAX}")
    return value


def _flag(value: str) -> str | None:
    word = value.lower()
    number = digits(value)
    if word in ("", "yes", "true") or (number is not None and number != 0):
        return ""
    if word in ("no", "false") or number == 0:
        return None
    raise ValueError("is not a flag value: empty, yes, true or 1 set it; no, false or 0 do not")


def _choice(*choices: str) -> Callable[[str], str | None]:
    def check(value: str) -> str:
        if value.lower() not in choices:
            names = [choice or "empty" for choice in choices]
            raise ValueError(f"must be {', '.join(names[:-1])} or {names[-1]}")
        return value.lower()

    return check


def _gpu_count(value: str) -> str:
    import re

    for item in _word(value).split(","):
        if not re.fullmatch(r"(?:[^:]+:)*[0-9]+", item):
            raise ValueError("is not a GPU count: [type:]count, comma-separated")
    return value


def _signal(value: str) -> str:
    import re

    match = re.fullmatch(r"(?:([A-Za-z]+):)?([^@]+)(?:@([0-9]+))?", value)
    if not match:
        raise ValueError("is not a signal: [R:]signal[@seconds]")
    prefix, name, delay = match.groups()
    if prefix and "B" in prefix.upper():
        raise ValueError("uses B: (signal the batch shell), but scrun jobs have no batch shell")
    if prefix and prefix.upper() != "R":
        raise ValueError(f"has an unknown prefix {prefix}: (only R: is possible)")
    number = digits(name)
    if number is not None:
        if not 1 <= number <= SIGRTMAX:
            raise ValueError(f"names signal {number}, which does not exist")
    else:
        bare = name.upper().removeprefix("SIG")
        if bare not in _SIGNAL_NAMES:
            raise ValueError(f"names an unknown signal {name!r}")
    if delay is not None and int(delay) > _MAX_SIGNAL_DELAY:
        raise ValueError(f"waits more than {_MAX_SIGNAL_DELAY} seconds")
    return value


def _absolute_path(value: str) -> str:
    if not _text(value).startswith("/"):
        raise ValueError("must be an absolute path")
    return value


def _profile(value: str) -> str:
    word = value.lower()
    if word in ("all", "none") or (word and set(word.split(",")) <= _PROFILE_TYPES):
        return word
    raise ValueError("must be all, none or a list of " + ",".join(sorted(_PROFILE_TYPES)))


def _acctg_freq(value: str) -> str:
    if digits(value) is not None:
        return value
    for item in value.split(","):
        kind, sep, seconds = item.partition("=")
        if not sep or kind.lower() not in _ACCTG_TYPES or digits(seconds) is None:
            raise ValueError(
                "must be seconds or a list of type=seconds with type "
                + "|".join(sorted(_ACCTG_TYPES))
            )
    return value


def _debug_level(value: str) -> str:
    word = value.lower()
    number = digits(word)
    if word in LEVELS or (number is not None and number <= max(LEVELS.values())):
        return word
    raise ValueError("must be a Slurm log level: " + "|".join(LEVELS) + " or 0-9")


TEXT = Kind("text", "anything but empty or control characters", _text)
WORD = Kind("word", "like text, without spaces", _word)
NAME_LIST = Kind("list", "comma-separated words, no empty item", _name_list)
COUNT = Kind("integer", "whole number ≥ 1", _at_least(1))
COUNT_OR_ZERO = Kind("integer ≥ 0", "whole number ≥ 0", _at_least(0))
TIME = Kind(
    "time", "`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, `INFINITE`, `UNLIMITED`, `-1`", _time
)
MEMORY = Kind("size", "`N[K\\|M\\|G\\|T]`, megabytes without a unit", _memory)
NODES = Kind("nodes", "`min[-max]`, min ≥ 1", _nodes)
FLAG = Kind(
    "flag", "set by empty, `yes`, `true` or a non-zero number; not set by `no`, `false`, `0`", _flag
)
EXCLUSIVE = Kind(
    "exclusive",
    "empty (the bare option), `user`, `mcs`, `topo` (Slurm ≥ 24.05)",
    _choice("", "user", "mcs", "topo"),
)
GPU_COUNT = Kind("GPU count", "`[type:]count`, comma-separated", _gpu_count)
SIGNAL = Kind(
    "signal",
    "`[R:]sig[@secs]`: sig a number or a name (`USR1`, `SIGTERM`, …), secs ≤ 65535",
    _signal,
)
PATH = Kind("absolute path", "text starting with `/`", _absolute_path)
OPEN_MODE = Kind("open mode", "`append` or `truncate`", _choice("append", "truncate"))
HINT = Kind(
    "hint",
    "`compute_bound`, `memory_bound`, `multithread`, `nomultithread`",
    _choice("compute_bound", "memory_bound", "multithread", "nomultithread"),
)
PROFILE = Kind("profile", "`all`, `none` or a list of `energy,lustre,network,task`", _profile)
ACCTG_FREQ = Kind(
    "accounting frequency",
    "seconds, or `type=seconds,…` with type `task`, `energy`, `network`, `filesystem`",
    _acctg_freq,
)
LOG_LEVEL = Kind("log level", "`quiet` … `debug5` or `0`-`9`", _debug_level)
# In the order the docs list them.
KINDS = (
    TEXT,
    WORD,
    NAME_LIST,
    COUNT,
    COUNT_OR_ZERO,
    TIME,
    MEMORY,
    NODES,
    FLAG,
    EXCLUSIVE,
    GPU_COUNT,
    SIGNAL,
    PATH,
    OPEN_MODE,
    HINT,
    PROFILE,
    ACCTG_FREQ,
    LOG_LEVEL,
)
