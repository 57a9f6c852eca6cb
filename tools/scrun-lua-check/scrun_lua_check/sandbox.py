"""The dry run's sandbox: file writes, shell calls and removals a script makes, recorded.

Installed into the script's Lua state before its chunk runs (scripts often keep
`local open = io.open`). Without --execute nothing outside a private temporary directory is
touched: a file opened for writing is redirected to a scratch copy that later reads of the same
path see, `os.execute`/`io.popen` run nothing, `os.remove`/`os.rename` do nothing. With
--execute everything really happens and is only recorded. The slurm.*_command calls are not
handled here: the runtime sends them to a CommandRunner, which the dry run chooses.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

# Receives the Python callbacks; replaces the io/os functions that touch the system.
_SANDBOX_LUA = r"""
local redirect, record, perform = ...
local real_open, real_lines, real_input, real_output = io.open, io.lines, io.input, io.output
local real_execute, real_popen = os.execute, io.popen
local real_remove, real_rename = os.remove, os.rename
local type = type

local function target(path, mode)
  if type(path) == "string" then return redirect(path, mode) end
  return path  -- not a path: let the real function raise its usual error
end
io.open = function(path, mode) return real_open(target(path, mode or "r"), mode) end
io.lines = function(path, ...) return real_lines(target(path, "r"), ...) end
io.input = function(file) return real_input(target(file, "r")) end
io.output = function(file) return real_output(target(file, "w")) end

os.execute = function(command)
  record("os.execute", command)
  if perform or command == nil then return real_execute(command) end
  return true, "exit", 0
end
io.popen = function(command, mode)
  record("io.popen", command)
  if perform then return real_popen(command, mode) end
  return real_open("/dev/null", mode or "r")
end
os.remove = function(path)
  record("os.remove", path)
  if perform then return real_remove(path) end
  return true
end
os.rename = function(old, new)
  record("os.rename", tostring(old) .. " -> " .. tostring(new))
  if perform then return real_rename(old, new) end
  return true
end
"""


@dataclass
class SideEffect:
    """A system call of the script other than slurm.*_command: os.execute, io.popen, ..."""

    kind: str
    detail: str


@dataclass
class FileSandbox:
    """Where writes go (`scratch` None: the real paths) and what happened, phase by phase."""

    scratch: str | None
    redirects: dict[str, str] = field(default_factory=dict)  # path as named -> file written
    written: list[str] = field(default_factory=list)  # paths opened for writing, this phase
    effects: list[SideEffect] = field(default_factory=list)  # this phase

    def install(self, lua: Any) -> None:
        """Replace the io/os functions of `lua` (the script's runtime, before its chunk runs:
        give it to Stager.load as `prepare`)."""
        lua.execute(_SANDBOX_LUA, self._redirect, self._record, self.scratch is None)

    def take(self) -> tuple[dict[str, bytes], list[SideEffect]]:
        """What the phase that just ended wrote (final contents) and did; starts a new phase."""
        contents: dict[str, bytes] = {}
        for name in self.written:
            try:
                with open(self.redirects.get(name, name), "rb") as stream:
                    contents[name] = stream.read()
            except OSError:
                continue  # opening for writing failed (no such directory): nothing was written
        effects = self.effects
        self.written, self.effects = [], []
        return contents, effects

    def _redirect(self, path: bytes, mode: bytes) -> bytes:
        name = os.path.normpath(os.fsdecode(path))
        if not any(flag in mode for flag in (b"w", b"a", b"+")):
            return os.fsencode(self.redirects[name]) if name in self.redirects else path
        if name not in self.written:
            self.written.append(name)
        if self.scratch is None:
            return path
        if name not in self.redirects:
            os.makedirs(self.scratch, exist_ok=True)
            copy = os.path.join(self.scratch, f"{len(self.redirects)}-{os.path.basename(name)}")
            if os.path.isfile(name):  # appending or updating starts from the real content
                shutil.copyfile(name, copy)
            self.redirects[name] = copy
        return os.fsencode(self.redirects[name])

    def _record(self, kind: bytes, detail: bytes | None) -> None:
        text = "" if detail is None else os.fsdecode(detail)
        self.effects.append(SideEffect(os.fsdecode(kind), text))
