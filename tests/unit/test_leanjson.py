"""leanjson reads and writes what json does, for the values a state file holds."""

import json
from typing import Any

import pytest
from scrunlib import leanjson

VALUES = [
    {},
    [],
    "",
    0,
    -7,
    2**70,
    0.1,
    1e300,
    -2.5e-7,
    True,
    False,
    None,
    "plain",
    'quote " backslash \\ slash / tab \t newline \n nul \0 bell \x07',
    "é ü 日本 \U0001f600 \ud800",  # non-ASCII, astral, a lone surrogate
    {"id": "c1", "annotations": {"a": "b", "": ""}, "phases": {"run": 0.123456789}},
    {"nested": [[], {}, [1, [2, [3, {"x": None}]]], (4, 5)]},
]


# json.dumps' choices leanjson.dumps makes as it does (slurm.to_json: indent 2, both True/False).
CHOICES: list[dict[str, Any]] = [
    {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ensure_ascii}
    for indent in (None, 2, 4)
    for sort_keys in (False, True)
    for ensure_ascii in (True, False)
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("choices", CHOICES, ids=str)
def test_dumps_writes_what_json_writes(value, choices):
    assert leanjson.dumps(value, **choices) == json.dumps(value, **choices)


@pytest.mark.parametrize("value", VALUES)
def test_loads_reads_what_json_reads(value):
    for text in (json.dumps(value), json.dumps(value, indent=2), f" \n{json.dumps(value)}\t "):
        assert leanjson.loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["", "   ", "{", '{"a": 1,}', "{} {}", "[1] x", "nul", "'a'", '{"a" 1}', '"\x01"']
)
def test_loads_refuses_what_json_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        leanjson.loads(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: "int key"}, {"set": {1}}])
def test_dumps_refuses_values_outside_its_types(value):
    with pytest.raises((ValueError, TypeError)):
        leanjson.dumps(value)


def _same(text):
    """leanjson.loads(text) and json.loads(text) agree: the same value (compared through
    json.dumps, where NaN equals itself) or both a ValueError."""
    try:
        expected = ("value", json.dumps(json.loads(text)))
    except ValueError:
        expected = ("error", "")
    try:
        got = ("value", json.dumps(leanjson.loads(text)))
    except ValueError:
        got = ("error", "")
    return got == expected


def _random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-(10**20), 10**20)
    if kind == 2:
        return rng.choice(
            [0.0, -0.0, 1e-300, 3.14, -2.5e17, rng.random() * 10 ** rng.randrange(-9, 9)]
        )
    if kind in (3, 4, 5):
        return _random_string(rng)
    if kind in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_random_string(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _random_string(rng):
    alphabet = 'ab "\\/\b\f\n\r\t\x00\x1f\x7f é\u2028\ud800\udc00日\U0001f600'
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))


def test_loads_agrees_with_json_on_generated_and_mutated_documents():
    """Seeded: every document written by json.dumps, cut at every position and with
    characters replaced, inserted and dropped, reads the same as with json.loads, or
    fails with ValueError as json.loads does (never another exception)."""
    import random

    rng = random.Random(21)
    pieces = list(' \t\n{}[]:,"\\u0aeE+-.01279tfnlsrINa\x00\x1f\x7fé\ud800')
    cases = 0
    for _ in range(300):
        value = _random_value(rng)
        text = json.dumps(value, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
        assert _same(text), text
        variants = [text[:cut] for cut in range(len(text))]
        for _ in range(20):
            at = rng.randrange(len(text) + 1)
            piece = rng.choice(pieces)
            variants += [text[:at] + piece + text[at + 1 :], text[:at] + piece + text[at:]]
        for variant in variants:
            assert _same(variant), repr(variant)
            cases += 1
    assert cases > 10_000


@pytest.mark.parametrize(
    "text",
    [
        "-",
        "-0",
        "-01",
        "0.",
        ".5",
        "1e",
        "1e+",
        "1E-7",
        "1.5e3",
        "2" * 5000,
        "1e400",
        "NaN",
        "-Infinity",
        "-NaN",
        "Infinity",
        "infinity",
        "nulll",
        "tru",
        '"\\u12"',
        '"\\u12g4"',
        '"\\ud800\\udc00"',
        '"\\ud800\\u0041"',
        '"\\ud800"',
        '"\\x"',
        '"\\',
        '"\\u+123"',
        '"\\u_123"',
        '"\t"',
        '"\x7f\u2028"',
        "\ufeff{}",
        '{"a":1,"a":2}',
        "[1,]",
        "[,1]",
        "{,}",
        '{"a"}',
        "[1 2]",
        "\x0c1",
        "1\x0c",
        "[]]",
        "{}}",
    ],
)
def test_loads_agrees_with_json_on_edge_cases(text):
    assert _same(text)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "[1, NaN]", '{"a": Infinity}'])
def test_loads_refuses_the_constants_when_told_to(text):
    """As json.loads with a parse_constant that raises (slurm.from_json): no other value
    changes, 1e400 is still infinite."""
    assert leanjson.loads(text) is not None
    with pytest.raises(ValueError):
        leanjson.loads(text, allow_constants=False)
    assert leanjson.loads("[1e400, -1, null]", allow_constants=False) == [float("inf"), -1, None]


def test_deep_nesting_is_a_value_error():
    """json.loads raises RecursionError there; leanjson refuses it as bad input."""
    with pytest.raises(ValueError, match="nested deeper"):
        leanjson.loads("[" * 100_000)
    assert leanjson.loads("[" * 100 + "]" * 100) == json.loads("[" * 100 + "]" * 100)


def test_loads_refuses_what_is_not_text():
    with pytest.raises(ValueError):
        leanjson.loads(b"{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(3))
def test_dumps_agrees_with_json_on_generated_values(seed):
    import random

    rng = random.Random(seed)
    for _ in range(500):
        value = _random_value(rng)
        for choices in CHOICES:
            assert leanjson.dumps(value, **choices) == json.dumps(value, **choices)
