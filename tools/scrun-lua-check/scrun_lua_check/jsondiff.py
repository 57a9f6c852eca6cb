"""Structural difference of two JSON documents, for "what would the script change in
config.json": one line per changed leaf (`~ root.path: "rootfs" -> "/scratch/..."`), which
is easier to review than a textual diff of two differently formatted files."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_VALUE_TEXT = 100


@dataclass(frozen=True)
class Change:
    op: str  # "+" added, "-" removed, "~" changed
    path: str  # `linux.uidMappings[0].hostID`, `annotations["io.podman.x"]`
    old: object = None
    new: object = None

    def text(self) -> str:
        if self.op == "~":
            return f"~ {self.path}: {short(self.old)} -> {short(self.new)}"
        return f"{self.op} {self.path}: {short(self.new if self.op == '+' else self.old)}"

    def as_dict(self) -> dict[str, object]:
        return {"op": self.op, "path": self.path, "old": self.old, "new": self.new}


def short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_TEXT else text[: MAX_VALUE_TEXT - 3] + "..."


def child(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def list_diff(old: list[object], new: list[object], path: str) -> list[Change]:
    """Lists are aligned first (so one removed mount or appended env entry is one change);
    in a replaced stretch, elements are compared pairwise and the rest added or removed."""
    keys_old = [json.dumps(item, sort_keys=True) for item in old]
    keys_new = [json.dumps(item, sort_keys=True) for item in new]
    changes: list[Change] = []
    matcher = difflib.SequenceMatcher(None, keys_old, keys_new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):
            changes.extend(diff(old[i1 + k], new[j1 + k], f"{path}[{i1 + k}]"))
        changes.extend(Change("-", f"{path}[{i}]", old=old[i]) for i in range(i1 + paired, i2))
        changes.extend(Change("+", f"{path}[{j}]", new=new[j]) for j in range(j1 + paired, j2))
    return changes


def diff(old: object, new: object, path: str = "") -> list[Change]:
    """Changes from `old` to `new` (objects key by key, lists aligned)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key, value in old.items():
            if key in new:
                changes.extend(diff(value, new[key], child(path, key)))
            else:
                changes.append(Change("-", child(path, key), old=value))
        changes.extend(Change("+", child(path, k), new=v) for k, v in new.items() if k not in old)
        return changes
    if isinstance(old, list) and isinstance(new, list):
        return list_diff(old, new, path)
    # 1000 and 1000.0 are equal in Python but not in a config a runtime parses strictly.
    if type(old) is type(new) and old == new:
        return []
    return [Change("~", path, old, new)]
