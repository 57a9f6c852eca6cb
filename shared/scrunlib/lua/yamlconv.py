"""YAML text to and from plain data, for scrun.lua's `slurm.from_yaml` and `slurm.to_yaml`.

They convert between Lua and data exactly as their JSON twins do; only the text differs. Plain
data is what JSON can hold (dict with string keys, list, str, int, float, bool, None): YAML's
other scalars become their text (a date `2024-01-02` the string "2024-01-02") and a non-string
key its YAML spelling, so a script sees the same table whichever format the file had. PyYAML
is imported on the first call only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from typing import Any


def loads(text: str) -> Any:
    """The data in `text`; ValueError when it is not YAML or holds binary data."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(" ".join(str(exc).split())) from None
    return _plain(data)


def dumps(data: Any) -> str:
    """Block-style YAML of plain data, keys sorted (as to_json's output)."""
    import yaml

    text: str = yaml.safe_dump(data, default_flow_style=False, sort_keys=True, allow_unicode=True)
    return text


def _plain(value: Any) -> Any:
    import datetime  # what PyYAML makes of a date; yaml has imported it

    if isinstance(value, dict):
        return {_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, datetime.date):  # datetime.datetime is a date too
        return value.isoformat()
    if isinstance(value, bytes):
        raise ValueError("binary data has no Lua form")
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(_plain(key))
