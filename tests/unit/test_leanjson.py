"""leanjson reads and writes what json does, for the values a state file holds."""

import json

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


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("indent", [None, 2, 4])
def test_dumps_writes_what_json_writes(value, indent):
    assert leanjson.dumps(value, indent=indent) == json.dumps(value, indent=indent)


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
