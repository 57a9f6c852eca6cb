"""Command-line parsing shared by the scrun commands: getopt's rules, as runc and crun behave.

The rules are getopt's (the module's unit tests check them against it), giving exactly the
runc/crun surface: `--opt=value` and `--opt value`, unique prefixes of long options,
attached short values, `--`. The getopt module itself is not used: it imports gettext and
re, most of what `scrun state` would otherwise cost over the interpreter's start
(tools/lint-tree/lint_tree/hotpath.py). Options a runtime caller may pass but which mean
nothing here are accepted, logged at debug level and ignored.
"""

from __future__ import annotations

from scrunlib import log
from scrunlib.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
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
    ignored: list[str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Parse `argv`; returns ({long name: value, True, count or list}, positional words).

    `stop_at_first_word`: global options end at the command word (POSIX getopt). The note
    on each option accepted and ignored is a debug line, or, given `ignored`, added to it for
    the caller to log once logging is configured (by what it parses here)."""
    everything = [*options, HELP]
    prefix = f"{what}: " if what else ""
    try:
        parsed, words = _getopt(list(argv), everything, permute=not stop_at_first_word)
    except UsageError as exc:
        raise UsageError(f"{prefix}{exc.message}") from None
    values: dict[str, Any] = {}
    for flag, opt, value in parsed:
        if opt is HELP:
            raise HelpRequested(usage)
        if opt.ignored:
            note = f"{prefix}ignoring option {flag}{'=' + value if opt.value else ''}"
            if ignored is None:
                log.debug(note)
            else:
                ignored.append(note)
        elif opt.repeat and opt.value:
            values.setdefault(opt.long, []).append(value)
        elif opt.repeat:
            values[opt.long] = values.get(opt.long, 0) + 1
        else:
            values[opt.long] = value if opt.value else True
    return values, words


def _getopt(
    argv: list[str], options: Sequence[Opt], *, permute: bool
) -> tuple[list[tuple[str, Opt, str]], list[str]]:
    """getopt.getopt (`permute` False: options end at the first word) or getopt.gnu_getopt
    (options and words mixed) over `options`: ([(flag, option, value)], words). The flag is
    `--long` (the full name, also for a prefix) or `-s`; the value "" for a flag."""
    parsed: list[tuple[str, Opt, str]] = []
    words: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if word == "--":
            words += argv[index:]
            break
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            opt = _long_option(name, options)
            if opt.value and not has_value:
                if index == len(argv):
                    raise UsageError(f"option --{name} needs a value")
                value = argv[index]
                index += 1
            elif has_value and not opt.value:
                raise UsageError(f"option --{name} takes no value")
            parsed.append((f"--{opt.long}", opt, value))
        elif word.startswith("-") and word != "-":
            letters = word[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                opt = _short_option(letter, options)
                value = ""
                if opt.value:
                    if not letters:
                        if index == len(argv):
                            raise UsageError(f"option -{letter} needs a value")
                        letters = argv[index]
                        index += 1
                    value, letters = letters, ""
                parsed.append((f"-{letter}", opt, value))
        elif permute:
            words.append(word)
        else:
            words += argv[index - 1 :]
            break
    return parsed, words


def _long_option(name: str, options: Sequence[Opt]) -> Opt:
    """The option `--name` means: its exact name, else the one it is a prefix of."""
    matches = [opt for opt in options if opt.long.startswith(name)]
    exact = [opt for opt in matches if opt.long == name]
    if exact:
        return exact[0]
    if not matches:
        raise UsageError(f"unknown option --{name}")
    if len(matches) > 1:
        raise UsageError(f"option --{name} is ambiguous")
    return matches[0]


def _short_option(letter: str, options: Sequence[Opt]) -> Opt:
    for opt in options:
        if opt.short == letter:
            return opt
    raise UsageError(f"unknown option -{letter}")


def one_id(words: Sequence[str], command: str, extra: str = "") -> list[str]:
    """Check the positional words: exactly the container id (plus `extra`, optional)."""
    limit = 2 if extra else 1
    if not words:
        raise UsageError(f"{command}: container id not provided")
    if len(words) > limit:
        raise UsageError(f"{command}: unexpected argument {words[limit]!r}")
    return list(words)
