"""The scrun.lua API as data: hooks, `slurm.*` functions and constants.

One description, used by the Lua runtime (to build the `slurm` table) and by
scrun-lua-check (to know what exists and how many arguments each call takes).
"""

from __future__ import annotations

from scrunlib import log

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from typing import AnyStr


class Hook:
    """One of the functions scrun calls in the script, and its parameters' names."""

    __slots__ = ("name", "params")

    def __init__(self, name: str, params: tuple[str, ...]) -> None:
        self.name = name
        self.params = params


STAGE_IN = Hook(
    "slurm_scrun_stage_in",
    ("id", "bundle", "spool_dir", "config_file", "job_id", "user_id", "group_id", "job_env"),
)
STAGE_OUT = Hook(
    "slurm_scrun_stage_out",
    (
        "id",
        "bundle",
        "orig_bundle",
        "root_path",
        "orig_root_path",
        "spool_dir",
        "config_file",
        "job_id",
        "user_id",
        "group_id",
    ),
)
HOOKS = (STAGE_IN, STAGE_OUT)  # required: a script without them does not load
# scrun's own, optional: called when the engine starts the container, before its step is
# launched, with stage-in's arguments. What the engine writes between create and start
# (podman 5 writes /etc/hosts and /etc/resolv.conf then) reaches a copy stage-in made here.
BEFORE_START = Hook("scrun_before_start", STAGE_IN.params)
OPTIONAL_HOOKS = (BEFORE_START,)
ALL_HOOKS = HOOKS + OPTIONAL_HOOKS


def shebang_length(source: AnyStr) -> int:
    """How much of a script's text Lua skips: luaL_loadfile (how Slurm loads scrun.lua)
    ignores a first line starting with `#` (a `#!` line), Lua's load() does not. The
    length up to, not including, that line's newline, so line numbers stay right; 0 when
    there is no such line."""
    if source[:1] not in ("#", b"#"):
        return 0
    newline = source.find("\n" if isinstance(source, str) else b"\n")
    return len(source) if newline < 0 else newline


class Function:
    """A `slurm.<name>` function: how many arguments a call may plausibly pass."""

    __slots__ = ("max_args", "min_args", "name")

    def __init__(self, name: str, min_args: int, max_args: int | None) -> None:
        self.name = name
        self.min_args = min_args
        self.max_args = max_args  # None: variadic (format functions)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("set_bundle_path", 1, 1),
        Function("set_root_path", 1, 1),
        Function("remote_command", 1, 1),
        Function("allocator_command", 1, 1),
        Function("log", 2, 2),
        Function("error", 1, 1),
        Function("log_error", 1, None),
        Function("log_info", 1, None),
        Function("log_verbose", 1, None),
        Function("log_debug", 1, None),
        Function("log_debug2", 1, None),
        Function("log_debug3", 1, None),
        Function("log_debug4", 1, None),
        Function("log_user", 1, None),
        Function("time_str2mins", 1, 1),
        Function("from_json", 1, 1),
        Function("to_json", 1, 1),
        Function("from_yaml", 1, 1),
        Function("to_yaml", 1, 1),
    )
}

# Numeric constants of the `slurm` table (Slurm's names and values; `MAIL_JOB_TIME890` is how
# Slurm spells the 90% mail flag). Slurm's error codes are in all_constants().
CONSTANTS: dict[str, int] = {
    "SUCCESS": 0,
    "ERROR": -1,
    "FAILURE": -1,
    "INFINITE": 0xFFFFFFFF,
    "INFINITE64": 0xFFFFFFFFFFFFFFFF,
    "NO_VAL": 0xFFFFFFFE,
    "NO_VAL64": 0xFFFFFFFFFFFFFFFE,
    "NO_VAL16": 0xFFFE,
    "NO_VAL8": 0xFE,
    "MEM_PER_CPU": 0x8000000000000000,
    "NICE_OFFSET": 0x80000000,
    "SHARED_FORCE": 0x8000,
    "JOB_SHARED_NONE": 0,
    "JOB_SHARED_OK": 1,
    "JOB_SHARED_USER": 2,
    "JOB_SHARED_MCS": 3,
    "ALLOC_SID_ADMIN_HOLD": 0x00000001,
    "ALLOC_SID_USER_HOLD": 0x00000002,
    "MAIL_JOB_BEGIN": 0x0001,
    "MAIL_JOB_END": 0x0002,
    "MAIL_JOB_FAIL": 0x0004,
    "MAIL_JOB_REQUEUE": 0x0008,
    "MAIL_JOB_TIME100": 0x0010,
    "MAIL_JOB_TIME890": 0x0020,
    "MAIL_JOB_TIME80": 0x0040,
    "MAIL_JOB_TIME50": 0x0080,
    "MAIL_JOB_STAGE_OUT": 0x0100,
    "MAIL_INVALID_DEPEND": 0x0400,
    # bits of a job's flags
    "KILL_INV_DEP": 1 << 0,
    "NO_KILL_INV_DEP": 1 << 1,
    "GRES_ENFORCE_BIND": 1 << 4,
    "SPREAD_JOB": 1 << 8,
    "USE_MIN_NODES": 1 << 9,
    "GRES_DISABLE_BIND": 1 << 19,
}


def all_constants() -> dict[str, int]:
    """CONSTANTS and Slurm's error codes (`SLURM_*`, `ESLURM_*`, ...). The error table is
    loaded on first use, so that an anchor without a scrun.lua never reads it."""
    from scrunlib.lua.errcodes import ERROR_CODES

    return {**ERROR_CODES, **CONSTANTS}


# String constants, filled in at run time (ClusterName from slurm.conf).
STRING_CONSTANTS = ("CLUSTER_NAME",)

# slurm.log(LEVEL, MSG) level numbers → Slurm log levels (0 info, 1 verbose, 2 debug, ...).
LOG_LEVEL_OFFSET = log.INFO  # slurm.log level 0 is info

# Slurm log level of each formatting log function.
# slurm.log_user would need slurm.user_msg, which scrun never defines (upstream it raises);
# here it logs at info level so a script shared with cli_filter still works.
LOG_FUNCTION_LEVELS: dict[str, int] = {
    "error": log.ERROR,
    "log_error": log.ERROR,
    "log_info": log.INFO,
    "log_user": log.INFO,
    "log_verbose": log.VERBOSE,
    "log_debug": log.DEBUG,
    "log_debug2": log.LEVELS["debug2"],
    "log_debug3": log.LEVELS["debug3"],
    "log_debug4": log.LEVELS["debug4"],
}
# slurm.log(LEVEL, MSG): levels above this are all debug4.
LOG_LEVEL_MAX = log.LEVELS["debug4"] - LOG_LEVEL_OFFSET
# Modules that `require` finds: both spellings used by 23.02–25.11 example scripts.
JSON_MODULES = ("json", "cjson")
