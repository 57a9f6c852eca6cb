"""scrunlib.options parses by getopt's rules without importing getopt: checked against it."""

import getopt
from typing import Any

import pytest
from scrunlib.errors import UsageError
from scrunlib.options import HelpRequested, Opt, parse

OPTIONS = (
    Opt("root", value=True),
    Opt("rootless", value=True),
    Opt("debug"),
    Opt("verbose", "v", repeat=True),
    Opt("slurm-conf", "f", value=True),
    Opt("log", value=True),
    Opt("log-format", value=True),
)
SHORT = "hvf:"
LONG = ["root=", "rootless=", "debug", "verbose", "slurm-conf=", "log=", "log-format=", "help"]

ACCEPTED = [
    [],
    ["state", "abc"],
    ["--root", "/r", "state", "abc"],
    ["--root=/r", "--debug", "create", "b", "x"],
    ["--log-f", "json", "--log", "/l", "x"],
    ["-vv", "-v", "--verb", "x", "-v"],
    ["-f/etc/slurm.conf", "-vf", "x", "y"],
    ["--debug", "--", "-v", "x"],
    ["-", "-v"],
    ["x", "--debug", "y", "--", "--root", "z"],
]
REFUSED = [
    (["--nope"], "unknown option --nope"),
    (["-q"], "unknown option -q"),
    (["--ro", "x"], "option --ro is ambiguous"),
    (["--root"], "option --root needs a value"),
    (["-f"], "option -f needs a value"),
    (["--debug=1"], "option --debug takes no value"),
]


@pytest.mark.parametrize("argv", ACCEPTED)
@pytest.mark.parametrize("stop", [True, False])
def test_parses_as_getopt_does(argv, stop):
    expected_pairs, expected_words = (getopt.getopt if stop else getopt.gnu_getopt)(
        argv, SHORT, LONG
    )
    values, words = parse(argv, OPTIONS, "usage", stop_at_first_word=stop)
    assert words == expected_words
    expected: dict[str, Any] = {}
    for flag, value in expected_pairs:
        name = {"-v": "verbose", "-f": "slurm-conf"}.get(flag, flag.lstrip("-"))
        expected[name] = expected.get(name, 0) + 1 if name == "verbose" else value or True
    assert values == expected


@pytest.mark.parametrize(("argv", "message"), REFUSED)
def test_refuses_what_getopt_refuses(argv, message):
    with pytest.raises(getopt.GetoptError):
        getopt.gnu_getopt(argv, SHORT, LONG)
    with pytest.raises(UsageError) as refused:
        parse(argv, OPTIONS, "usage", what="state")
    assert refused.value.message == f"state: {message}"
    assert refused.value.exit_code == 2


def test_help_anywhere_among_options():
    with pytest.raises(HelpRequested) as asked:
        parse(["--debug", "-h"], OPTIONS, "the usage")
    assert asked.value.text == "the usage"
