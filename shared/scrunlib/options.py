"""Command-line parsing shared by the scrun commands: getopt, as runc and crun behave.

getopt (not argparse) keeps the hot path cheap and gives exactly the runc/crun surface:
`--opt=value` and `--opt value`, unique prefixes of long options, attached short values.
Options a runtime caller may pass but which mean nothing here are accepted, logged at
debug level and ignored.
"""

from __future__ import annotations

import getopt
from collections.abc import Sequence

from scrunlib import log
from scrunlib.errors import UsageError

TYPE_CHECKING = False  # typing costs milliseconds on every call; annotations are lazy
if TYPE_CHECKING:
    from typing import Any


class Opt:
    """One option. `ignored`: accepted for runc/crun callers, no effect; `repeat`: counted,
    or with `value` each value collected in a list."""

    __slots__ = ("help", "ignored", "long", "metavar", "repeat", "short", "value")

    def __init__(
        self,
        long: str,
        short: str = "",
        *,
        value: bool = False,
        ignored: bool = False,
        repeat: bool = False,
        help: str = "",
        metavar: str = "VALUE",
    ) -> None:
        self.long, self.short, self.value = long, short, value
        self.ignored, self.repeat, self.help = ignored, repeat, help
        self.metavar = metavar

    def usage(self) -> str:
        names = f"-{self.short}, --{self.long}" if self.short else f"    --{self.long}"
        if self.value:
            names += f" {self.metavar}"
        note = "(accepted, ignored)" if self.ignored else ""
        text = " ".join(part for part in (self.help, note) if part)
        return f"  {names:<28} {text}"


class HelpRequested(Exception):
    """`--help`: print the usage text and exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


HELP = Opt("help", "h", help="show this help")


def usage_text(synopsis: str, description: str, options: Sequence[Opt]) -> str:
    lines = [f"usage: {synopsis}", "", description, "", "options:"]
    lines += [opt.usage() for opt in [*options, HELP]]
    return "\n".join(lines) + "\n"


def parse(
    argv: Sequence[str],
    options: Sequence[Opt],
    usage: str,
    *,
    stop_at_first_word: bool = False,
    what: str = "",
) -> tuple[dict[str, Any], list[str]]:
    """Parse `argv`; returns ({long name: value, True, count or list}, positional words).

    `stop_at_first_word`: global options end at the command word (POSIX getopt)."""
    everything = [*options, HELP]
    shortopts = "".join(o.short + (":" if o.value else "") for o in everything if o.short)
    longopts = [o.long + ("=" if o.value else "") for o in everything]
    parser = getopt.getopt if stop_at_first_word else getopt.gnu_getopt
    prefix = f"{what}: " if what else ""
    try:
        parsed, words = parser(list(argv), shortopts, longopts)
    except getopt.GetoptError as exc:
        raise UsageError(f"{prefix}{_explain(exc)}") from None
    by_flag = {f"--{o.long}": o for o in everything} | {
        f"-{o.short}": o for o in everything if o.short
    }
    values: dict[str, Any] = {}
    for flag, value in parsed:
        opt = by_flag[flag]
        if opt is HELP:
            raise HelpRequested(usage)
        if opt.ignored:
            log.debug(f"{prefix}ignoring option {flag}{'=' + value if opt.value else ''}")
        elif opt.repeat and opt.value:
            values.setdefault(opt.long, []).append(value)
        elif opt.repeat:
            values[opt.long] = values.get(opt.long, 0) + 1
        else:
            values[opt.long] = value if opt.value else True
    return values, words


def _explain(exc: getopt.GetoptError) -> str:
    option = (
        exc.opt
        if exc.opt.startswith("-") or not exc.opt
        else (f"--{exc.opt}" if len(exc.opt) > 1 else f"-{exc.opt}")
    )
    if "not recognized" in exc.msg:
        return f"unknown option {option}"
    if "requires argument" in exc.msg:
        return f"option {option} needs a value"
    if "must not have an argument" in exc.msg:
        return f"option {option} takes no value"
    if "not a unique prefix" in exc.msg:
        return f"option {option} is ambiguous"
    return exc.msg


def one_id(words: Sequence[str], command: str, extra: str = "") -> list[str]:
    """Check the positional words: exactly the container id (plus `extra`, optional)."""
    limit = 2 if extra else 1
    if not words:
        raise UsageError(f"{command}: container id not provided")
    if len(words) > limit:
        raise UsageError(f"{command}: unexpected argument {words[limit]!r}")
    return list(words)
