"""Stage-in and stage-out through the site's scrun.lua: what the anchor and scrun-stage call.

This module does not import lupa; `Stager.load` does, so importing the types here is cheap.
Semantics follow upstream scrun's scrun.lua interface. Deliberate differences, each of which
makes a script easier to write or a failure easier to see, and none of which breaks the man
page's example:
  * job_id, user_id and group_id are Lua integers (`%d` works without `math.floor`);
  * job_env is a 1-based Lua array (upstream starts at 0, so `ipairs` missed the first entry);
  * every hook, commands included, has a time limit (a runaway loop or a hung command makes
    the hook fail); a failure's message carries the script's own words (its Lua error, or its
    last error/info log line);
  * a command killed by signal N reports 128+N (upstream: 0);
  * to_json writes an emptied JSON object back as `{}` (upstream: `[]`, which runc rejects)
    and integral floats as integers (`1000`, not `1000.0`);
  * slurm.log_user logs at info level (upstream raises: slurm.user_msg is not defined);
  * os.exit raises a Lua error instead of ending the anchor;
  * a command's output line that starts with `scrun: ` is a notice for the user, said on the
    container's stderr as it comes (scrunlib.lua.commands), not returned to the script.
"""

from __future__ import annotations

from scrunlib.lua import api, find_script
from scrunlib.lua.commands import CommandRunner, RecordingRunner, SubprocessRunner
from scrunlib.lua.records import CommandRecord, LogRecord, StageContext, StageResult
from scrunlib.siteconfig import DEFAULT_LUA_TIMEOUT

TYPE_CHECKING = False  # the anchor imports this module: no typing (lint_tree/hotpath.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from scrunlib.lua.runtime import LuaScript

# The records and runners are re-exported: a stage caller needs nothing else from this package.
__all__ = [
    "CommandRecord",
    "CommandRunner",
    "LogRecord",
    "RecordingRunner",
    "StageContext",
    "StageResult",
    "Stager",
    "SubprocessRunner",
    "find_script",
]


class Stager:
    """One loaded scrun.lua. Keep it for the container's life: globals set by the script at
    load time or in stage_in are still there in stage_out, as upstream."""

    __slots__ = ("_script", "_staged")

    def __init__(self, script: LuaScript) -> None:
        self._script = script
        self._staged = False

    @classmethod
    def load(
        cls,
        script_path: str,
        *,
        runner: CommandRunner,
        cluster_name: str = "",
        timeout: float = DEFAULT_LUA_TIMEOUT,
        prepare: Callable[[Any], None] | None = None,
    ) -> Stager:
        """Load and run the script once. Raises LuaError `unable to load <path>: ...`.
        `prepare` gets the Lua runtime before the script's chunk runs (see LuaScript)."""
        from scrunlib.lua.runtime import LuaScript

        script = LuaScript(
            script_path,
            runner=runner,
            cluster_name=cluster_name,
            timeout=timeout,
            prepare=prepare,
        )
        return cls(script)

    @classmethod
    def for_slurm(
        cls,
        script_path: str,
        *,
        slurm_conf: str,
        timeout: float,
        srun: str | None = None,
        tell_user: Callable[[str], None] | None = None,
    ) -> Stager:
        """Load the script to run its commands for real, against the cluster of `slurm_conf`
        (its ClusterName is slurm.CLUSTER_NAME). `srun` None: found on the first
        remote_command. `tell_user` gets the commands' notices (scrunlib.lua.commands).
        Raises LuaError as `load`."""
        from scrunlib.slurm import cluster_name

        runner = SubprocessRunner(
            slurm_conf=slurm_conf, srun=srun, timeout=timeout, tell_user=tell_user
        )
        return cls.load(
            script_path, runner=runner, cluster_name=cluster_name(slurm_conf), timeout=timeout
        )

    @property
    def path(self) -> str:
        return self._script.path

    @property
    def load_logs(self) -> list[LogRecord]:
        """What the script's top-level code logged while loading."""
        return self._script.load_logs

    @property
    def bundle(self) -> str:
        """The current bundle: the original until stage_in calls slurm.set_bundle_path."""
        return self._script.paths.bundle

    @property
    def root_path(self) -> str:
        return self._script.paths.root_path

    def stage_in(self, ctx: StageContext) -> StageResult:
        self._set_paths(ctx, ctx.bundle, ctx.root_path)
        self._staged = True
        return self._call(api.STAGE_IN, _stage_in_args(ctx), ctx)

    def defines(self, hook: api.Hook) -> bool:
        return self._script.defines(hook)

    def before_start(self, ctx: StageContext) -> StageResult:
        """Call scrun_before_start, the script's own (optional: success when it has none),
        with stage-in's arguments, once the engine starts the container and before its
        step is launched. The paths stay as stage-in left them."""
        return self._call(api.BEFORE_START, _stage_in_args(ctx), ctx)

    def stage_out(
        self, ctx: StageContext, *, bundle: str | None = None, root_path: str | None = None
    ) -> StageResult:
        """Stage out from the paths stage_in left (or `bundle`/`root_path` when given, e.g.
        scrun-stage working on a bundle staged earlier by another process)."""
        paths = self._script.paths
        if not self._staged:
            paths.bundle, paths.root_path = ctx.bundle, ctx.root_path
        self._set_paths(ctx, bundle or paths.bundle, root_path or paths.root_path)
        args = (
            ctx.container_id,
            paths.bundle,
            ctx.orig_bundle,
            paths.root_path,
            ctx.root_path,
            ctx.spool_dir,
            ctx.config_file,
            ctx.job_id,
            ctx.user_id,
            ctx.group_id,
        )
        return self._call(api.STAGE_OUT, args, ctx)

    def _set_paths(self, ctx: StageContext, bundle: str, root_path: str) -> None:
        paths = self._script.paths
        paths.bundle, paths.root_path = bundle, root_path
        paths.orig_bundle, paths.orig_root_path = ctx.orig_bundle, ctx.root_path

    def _call(self, hook: api.Hook, args: Sequence[object], ctx: StageContext) -> StageResult:
        return self._script.call(hook, args, job_env=ctx.job_env, job_id=ctx.job_id)


def _stage_in_args(ctx: StageContext) -> tuple[object, ...]:
    """slurm_scrun_stage_in's arguments (scrun_before_start's too)."""
    return (
        ctx.container_id,
        ctx.bundle,
        ctx.spool_dir,
        ctx.config_file,
        ctx.job_id,
        ctx.user_id,
        ctx.group_id,
        list(ctx.job_env),
    )
