"""scrun.lua in an embedded Lua 5.4 (lupa): the `slurm` table, loading, calling the hooks.

Only this module and scrunlib.lua.convert import lupa; scrunlib.lua.stage loads them on first
use so that commands that never run Lua do not pay for it.

What a script can reach is plain Lua: every Python callback sits behind a Lua closure and
answers `(true, results...)` or `(false, message)`, the closure raises the message at the
script's own line, attribute access on any Python object is refused, and lupa's `python`
module is removed. The script keeps the invoking user's rights and nothing more (it still has
`io` and `os`, as upstream). How values cross between Python and Lua (strings as bytes,
numbers, JSON) is scrunlib.lua.convert.
"""

from __future__ import annotations

import math
import time

# Not `from lupa import lua54` (re: scrunlib.lua.convert).
import lupa.lua54 as lua54

from scrunlib import log
from scrunlib.errors import LuaLoadError, reason
from scrunlib.lua import api
from scrunlib.lua.commands import CommandTimeout, command_env
from scrunlib.lua.convert import (
    JsonCodec,
    Refused,
    as_lua_string,
    decode,
    describe,
    encode,
    lua_integer,
    lua_type,
    to_number,
)
from scrunlib.lua.records import CommandRecord, LogRecord, StageResult
from scrunlib.timestr import INVALID, time_str2mins

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn

    from scrunlib.lua.commands import CommandRunner
    from scrunlib.lua.records import CommandKind

# How often (in Lua VM instructions) a running hook checks its deadline: often enough to stop a
# runaway loop within milliseconds, rarely enough to cost nothing measurable.
INSTRUCTIONS_PER_CHECK = 1_000_000

# Runs once per Lua state, before the script. Receives the Python callbacks and data, builds
# the global `slurm` table, the `json`/`cjson` modules, and returns the helpers Python uses.
_PRELUDE = r"""
local functions, internal, constants, cluster_name, log_levels, json_modules, check_every = ...
local error, pcall, xpcall, pairs, ipairs, type, tostring, select =
      error, pcall, xpcall, pairs, ipairs, type, tostring, select
local pack, unpack, format, load = table.pack, table.unpack, string.format, load
local sethook, traceback, setmetatable = debug.sethook, debug.traceback, setmetatable

local function wrap(f)
  return function(...)
    local r = pack(f(...))
    if not r[1] then error(r[2], 2) end
    return unpack(r, 2, r.n)
  end
end

local slurm = {}
for name, value in pairs(constants) do slurm[name] = value end
slurm.CLUSTER_NAME = cluster_name
for name, f in pairs(functions) do slurm[name] = wrap(f) end

local emit, emit_at = wrap(internal.log), wrap(internal.log_at)
for name, level in pairs(log_levels) do
  slurm[name] = function(fmt, ...)
    local message = fmt
    if select("#", ...) > 0 then
      local ok, text = pcall(format, fmt, ...)
      if not ok then error(text, 2) end
      message = text
    end
    emit(level, tostring(message))
  end
end
-- Slurm's code takes (LEVEL, MSG); its man page shows (MSG, LEVEL) and scripts use both.
function slurm.log(a, b)
  if type(a) ~= "number" and type(b) == "number" then a, b = b, a end
  emit_at(a, tostring(b))
end

local marks = setmetatable({}, {__mode = "k"})
local null = setmetatable({}, {
  __tostring = function() return "null" end,
  __newindex = function() error("json.null is read-only", 2) end,
})
marks[null] = "null"
local json = {decode = slurm.from_json, encode = slurm.to_json, null = null}
for _, name in ipairs(json_modules) do
  package.preload[name] = function() return json end
end

_G.slurm = slurm
_G.python = nil
package.loaded.python = nil
-- os.exit would end the anchor (or scrun create) from inside a hook.
os.exit = function()
  error("os.exit is not available in scrun.lua: return slurm.ERROR instead", 2)
end

local expired = internal.expired
local function check_time()
  local message = expired()
  if message then error(message, 2) end
end
local function on_error(e)
  return {message = tostring(e), traceback = traceback(nil, 2), error = e}
end
local function run(f, ...)
  sethook(check_time, "", check_every)
  local r = pack(xpcall(f, on_error, ...))
  sethook()
  return r
end
-- load returns one value on success, two on failure: always two, for Python to unpack.
local function compile(source, chunkname)
  local chunk, problem = load(source, chunkname)
  return chunk, problem
end
return run, compile, marks
"""


class Paths:
    """What `set_bundle_path` / `set_root_path` change. The stager sets the originals before a
    hook and reads the current values after it."""

    __slots__ = ("bundle", "orig_bundle", "orig_root_path", "root_path")

    def __init__(self) -> None:
        self.bundle, self.root_path, self.orig_root_path = "", "", ""
        self.orig_bundle: str | None = None


class _Call:
    """State of the Lua code running right now (top-level chunk or one hook)."""

    __slots__ = ("commands", "deadline", "env", "job_id", "logs", "what")

    def __init__(self, what: str, env: dict[str, str], job_id: int | None, deadline: float) -> None:
        self.what, self.env, self.deadline = what, env, deadline
        self.job_id = job_id  # None while the chunk loads: only the hooks have a job
        self.commands: list[CommandRecord] = []
        self.logs: list[LogRecord] = []

    @property
    def in_hook(self) -> bool:
        return self.job_id is not None


class LuaScript:
    """One loaded scrun.lua and its Lua state (globals persist from stage-in to stage-out).

    `prepare`, when given, is called with the lupa runtime after the `slurm` table is built
    and before the script's chunk runs: the place to change the script's environment (the
    dry run of scrun-lua-check replaces io/os functions there).
    """

    def __init__(
        self,
        path: str,
        *,
        runner: CommandRunner,
        cluster_name: str,
        timeout: float,
        prepare: Callable[[Any], None] | None = None,
    ) -> None:
        self.path = path
        self.runner = runner
        self.timeout = timeout
        self.paths = Paths()
        self.load_logs: list[LogRecord] = []
        self._lua = lua54.LuaRuntime(
            encoding=None,
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            attribute_filter=_refuse_attribute,
        )
        self._call = _Call("load", command_env(()), None, math.inf)
        self._run, self._compile, self._marks = self._lua.execute(
            _PRELUDE,
            self._table(self._slurm_functions()),
            self._table(
                {
                    "log": _guarded(self._log),
                    "log_at": _guarded(self._log_at),
                    "expired": self._expired,
                }
            ),
            self._table({name: lua_integer(value) for name, value in api.all_constants().items()}),
            encode(cluster_name),
            self._table(api.LOG_FUNCTION_LEVELS),
            self._lua.table_from([encode(name) for name in api.JSON_MODULES]),
            INSTRUCTIONS_PER_CHECK,
        )
        self._json = JsonCodec(self._lua, self._marks)
        if prepare is not None:
            prepare(self._lua)
        self._load()

    # -- loading -------------------------------------------------------------------------

    def _load(self) -> None:
        """Compile and run the chunk once, then insist on both hooks (as upstream)."""
        try:
            with open(self.path, "rb") as stream:
                source = stream.read()
        except FileNotFoundError:
            self._fail_load("the file does not exist")
        except OSError as exc:
            self._fail_load(f"cannot read it: {reason(exc)}")
        source = source[api.shebang_length(source) :]
        chunk, problem = self._compile(source, encode("@" + self.path))
        if chunk is None:
            self._fail_load(self._full_path(decode(problem)))
        self._call.deadline = self._deadline()
        start = time.monotonic()
        ok, value, detail, _ = self._unpack(self._run(chunk))
        self.load_logs = self._call.logs
        if not ok:
            self._fail_load(detail)
        if _chunk_status(value) != 0:
            self._fail_load(f"the script returned {describe(value)} (expected slurm.SUCCESS)")
        for hook in api.ALL_HOOKS:  # (an optional one may be absent, not anything else)
            kind, required = lua_type(self._lua.globals()[encode(hook.name)]), hook in api.HOOKS
            if kind != "function" and (required or kind != "nil"):
                what = "is not defined" if kind == "nil" else f"is a {kind}, not a function"
                self._fail_load(f"{'required ' if required else ''}function {hook.name} {what}")
        log.debug(f"lua: loaded {self.path} in {time.monotonic() - start:.3f} s")

    def _fail_load(self, detail: str) -> NoReturn:
        raise LuaLoadError(f"unable to load {self.path}: {detail}")

    # -- calling hooks -------------------------------------------------------------------

    def defines(self, hook: api.Hook) -> bool:
        """Whether the script has `hook` (an optional one may be absent)."""
        return lua_type(self._lua.globals()[encode(hook.name)]) == "function"

    def call(
        self,
        hook: api.Hook,
        args: Sequence[object],
        *,
        job_env: Sequence[str],
        job_id: int,
    ) -> StageResult:
        """Call `hook` with `args` (str, int, None, or a list of str → Lua array).

        Commands the hook runs get `job_env` (or this process's environment when it is
        empty). The whole call, commands included, is bounded by the script timeout.
        """
        self._call = _Call(hook.name, command_env(job_env), job_id, self._deadline())
        start = time.monotonic()
        function = self._lua.globals()[encode(hook.name)]
        if lua_type(function) != "function":
            # Upstream: a hook the script removed after loading counts as success.
            return self._outcome(start, True, 0, f"{hook.name} is not defined: nothing to do")
        ok, value, detail, traceback = self._unpack(self._run(function, *map(self._to_lua, args)))
        if not ok:
            return self._outcome(start, False, -1, f"{hook.name} failed: {detail}", traceback)
        if isinstance(value, bool) or not isinstance(value, int | float):
            message = f"{hook.name} returned {describe(value)}, not a number: treated as success"
            log.verbose(f"lua: {message}")
            return self._outcome(start, True, 0, message)
        status = int(value) if math.isfinite(value) else -1
        if status == 0:
            return self._outcome(start, True, 0, f"{hook.name} succeeded")
        why = _reason(self._call.logs)
        message = f"{self.path}: {hook.name} returned {status}" + (f": {why}" if why else "")
        return self._outcome(start, False, status, message)

    def _outcome(
        self, start: float, ok: bool, status: int, message: str, traceback: str = ""
    ) -> StageResult:
        call = self._call
        return StageResult(
            hook=call.what,
            ok=ok,
            status=status,
            message=message,
            bundle=self.paths.bundle,
            root_path=self.paths.root_path,
            commands=call.commands,
            logs=call.logs,
            seconds=time.monotonic() - start,
            traceback=traceback,
        )

    def _unpack(self, result: Any) -> tuple[bool, Any, str, str]:
        """`xpcall` results → (ok, first return value, error message with position, traceback)."""
        if result[1]:
            return True, result[2], "", ""
        error = result[2]
        original = error[b"error"]
        if isinstance(original, BaseException) and not isinstance(original, Exception):
            raise original  # Ctrl-C or SystemExit inside a callback: not the script's error
        message = self._full_path(decode(error[b"message"]))
        traceback = self._full_path(decode(error[b"traceback"]))
        log.debug(f"lua: {self._call.what}: {message}\n{traceback}")
        return False, None, message, traceback

    def _full_path(self, text: str) -> str:
        """Lua shortens chunk names past 60 characters to `...<tail>`: put the path back.
        (Only failures have positions to restore: `re` is imported for them.)"""
        import re

        def restore(match: re.Match[str]) -> str:
            return self.path if self.path.endswith(match.group(1)) else match.group(0)

        return re.sub(r"\.\.\.([^\s:]+)(?=:)", restore, text)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _to_lua(self, value: object) -> Any:
        if isinstance(value, str):
            return encode(value)
        if isinstance(value, list | tuple):
            return self._lua.table_from([self._to_lua(item) for item in value])
        return value

    def _table(self, mapping: Mapping[str, Any]) -> Any:
        return self._lua.table_from({encode(key): value for key, value in mapping.items()})

    # -- the slurm.* callbacks -----------------------------------------------------------

    def _slurm_functions(self) -> dict[str, Callable[..., tuple[Any, ...]]]:
        """Every `slurm.*` function that is not a log function, by name."""
        return {
            name: _guarded(function)
            for name, function in {
                "set_bundle_path": self._set_bundle_path,
                "set_root_path": self._set_root_path,
                "allocator_command": self._allocator_command,
                "remote_command": self._remote_command,
                "time_str2mins": _time_str2mins,
                "from_json": self._from_json,
                "to_json": self._to_json,
                "from_yaml": self._from_yaml,
                "to_yaml": self._to_yaml,
            }.items()
        }

    def _set_bundle_path(self, *args: Any) -> tuple[Any, ...]:
        self.paths.bundle = self._path_argument("set_bundle_path", args)
        orig = self.paths.orig_bundle
        return (None if orig is None else encode(orig),)

    def _set_root_path(self, *args: Any) -> tuple[Any, ...]:
        self.paths.root_path = self._path_argument("set_root_path", args)
        return (encode(self.paths.orig_root_path),)

    def _path_argument(self, name: str, args: Sequence[Any]) -> str:
        if not self._call.in_hook:
            raise Refused(f"slurm.{name} only works inside the stage functions")
        path = _string_argument(name, args)
        if not path:
            raise Refused(f"slurm.{name}: the path is empty")
        return path

    def _allocator_command(self, *args: Any) -> tuple[Any, ...]:
        script = _string_argument("allocator_command", args)
        return self._command(
            "allocator",
            script,
            lambda timeout: self.runner.allocator(script, self._call.env, timeout),
        )

    def _remote_command(self, *args: Any) -> tuple[Any, ...]:
        script = _string_argument("remote_command", args)
        job_id = self._call.job_id
        if job_id is None:
            raise Refused("slurm.remote_command needs the job: call it from the stage functions")
        return self._command(
            "remote",
            script,
            lambda timeout: self.runner.remote(script, self._call.env, job_id, timeout),
        )

    def _command(
        self, kind: CommandKind, script: str, run: Callable[[float], tuple[int, str]]
    ) -> tuple[Any, ...]:
        """Run one command within what is left of the call's time, and record it."""
        call = self._call
        remaining = call.deadline - time.monotonic()
        if remaining <= 0:
            raise Refused(self._time_limit_message())
        start = time.monotonic()
        try:
            status, output = run(remaining)
        except CommandTimeout as exc:
            call.commands.append(
                CommandRecord(kind, script, -1, exc.output, time.monotonic() - start, True)
            )
            raise Refused(f"slurm.{kind}_command {exc}: {script}") from None
        seconds = time.monotonic() - start
        call.commands.append(CommandRecord(kind, script, status, output, seconds))
        log.debug(f"lua: {kind}_command exited {status} after {seconds:.2f} s: {script}")
        return status, encode(output)

    def _from_json(self, *args: Any) -> tuple[Any, ...]:
        return (self._json.from_json(args[0] if args else None),)

    def _to_json(self, *args: Any) -> tuple[Any, ...]:
        return (self._json.to_json(args[0] if args else None),)

    def _from_yaml(self, *args: Any) -> tuple[Any, ...]:
        return (self._json.from_yaml(args[0] if args else None),)

    def _to_yaml(self, *args: Any) -> tuple[Any, ...]:
        return (self._json.to_yaml(args[0] if args else None),)

    # -- internal callbacks (not in the slurm table) -------------------------------------

    def _log(self, level: int, message: bytes) -> tuple[Any, ...]:
        text = decode(message)
        self._call.logs.append(LogRecord(level, text))
        log.log(level, f"lua: {text}")
        return ()

    def _log_at(self, level: Any, message: bytes) -> tuple[Any, ...]:
        """slurm.log(LEVEL, MSG): 0 info .. 5+ debug4; negative levels are not logged."""
        number = to_number(level) if isinstance(level, bytes) else level
        if isinstance(number, bool) or not isinstance(number, int | float) or math.isnan(number):
            raise Refused(f"bad argument to 'slurm.log' (level expected, got {lua_type(level)})")
        if number < 0:
            return ()
        return self._log(min(int(number), api.LOG_LEVEL_MAX) + api.LOG_LEVEL_OFFSET, message)

    def _expired(self) -> bytes | None:
        if time.monotonic() < self._call.deadline:
            return None
        return encode(self._time_limit_message())

    def _time_limit_message(self) -> str:
        return f"{self._call.what} ran past its time limit of {self.timeout:g} s"


def _guarded(function: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """Turn `Refused` into the (false, message) answer the Lua wrappers raise from."""

    def guarded(*args: Any) -> tuple[Any, ...]:
        try:
            return (True, *function(*args))
        except Refused as exc:
            return False, encode(str(exc))

    return guarded


def _time_str2mins(*args: Any) -> tuple[Any, ...]:
    try:
        return (time_str2mins(_string_argument("time_str2mins", args)),)
    except Refused:
        return (INVALID,)  # nil, a table or a boolean is no time string either


def _string_argument(name: str, args: Sequence[Any]) -> str:
    """A string argument as Lua's luaL_checkstring sees it: numbers are converted."""
    value = args[0] if args else None
    text = as_lua_string(value)
    if text is None:
        raise Refused(f"bad argument #1 to 'slurm.{name}' (string expected, got {lua_type(value)})")
    return text


def _refuse_attribute(obj: object, name: object, _is_setting: bool) -> object:
    """lupa's attribute filter: Lua never reads or writes attributes of Python objects."""
    raise AttributeError("Python attributes are not accessible from scrun.lua")


def _reason(logs: Sequence[LogRecord]) -> str:
    """Why a hook failed, in the script's words: its last error line, else its last info
    line (the upstream example logs `mkdir(...) failed` at info level)."""
    for threshold in (log.ERROR, log.INFO):
        for record in reversed(logs):
            if record.level <= threshold:
                return record.message
    return ""


def _chunk_status(value: Any) -> float:
    """The numeric conversion upstream applies to the chunk's return value (lua_tonumber)."""
    if isinstance(value, bytes):
        return to_number(value) or 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return 0
