"""Stage-out that survives the anchor: from the moment stage-in begins until stage-out has
run, the spool keeps what stage-out needs (`stage.json`). The anchor stages out and removes
it; when the anchor died first (SIGKILL, a crash), `scrun delete` finds it and runs
scrun.lua's stage-out itself, with the arguments the anchor would have passed.

What cannot be carried over: Lua globals the script set in stage-in (a fresh copy of the
script runs stage-out).
"""

from __future__ import annotations

import os

from scrunlib import leanjson, log
from scrunlib.errors import LuaError, ScrunError, reason
from scrunlib.files import write_atomically

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from scrunlib.lua.records import StageContext
    from scrunlib.lua.stage import Stager
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.spool import Spool


def load_stager(
    script: str,
    slurm_conf: str,
    site: SiteConfig,
    tell_user: Callable[[str], None] | None = None,
) -> Stager | None:
    """scrun.lua at `script`, loaded once (its top level runs); None when there is none.
    `tell_user` gets its commands' notices for the user. Raises LuaError when it cannot be
    loaded."""
    if not os.path.exists(script):
        return None
    from scrunlib.lua.stage import Stager

    return Stager.for_slurm(
        script,
        slurm_conf=slurm_conf,
        timeout=site.lua_timeout,
        srun=site.command("srun"),
        tell_user=tell_user,
    )


class PendingStageOut:
    """A container staged in (or being staged in) and not staged out yet: the hooks'
    arguments, the paths stage-in chose, and the script and slurm.conf it ran with."""

    __slots__ = ("bundle", "context", "root_path", "script", "slurm_conf")

    def __init__(
        self, context: StageContext, *, bundle: str, root_path: str, script: str, slurm_conf: str
    ) -> None:
        self.context, self.bundle, self.root_path = context, bundle, root_path
        self.script, self.slurm_conf = script, slurm_conf

    def save(self, spool: Spool) -> None:
        record = {
            "context": self.context.as_dict(),
            "bundle": self.bundle,
            "root_path": self.root_path,
            "script": self.script,
            "slurm_conf": self.slurm_conf,
        }
        try:
            write_atomically(spool.stage_file, leanjson.dumps(record))
        except OSError as exc:
            raise ScrunError(f"cannot save {spool.stage_file}: {reason(exc)}") from exc

    @classmethod
    def load(cls, spool: Spool) -> PendingStageOut | None:
        """The pending stage-out, None when there is none (or it is unreadable: logged)."""
        from scrunlib.lua.records import StageContext

        try:
            with open(spool.stage_file, encoding="utf-8") as stream:
                record: dict[str, Any] = leanjson.loads(stream.read())
            context = dict(record["context"])
            context["job_env"] = tuple(context["job_env"])
            return cls(
                StageContext(**context),
                bundle=record["bundle"],
                root_path=record["root_path"],
                script=record["script"],
                slurm_conf=record["slurm_conf"],
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error(f"cannot read {spool.stage_file}: {exc}")
            return None

    def keep_config(self, spool: Spool) -> None:
        """Stage-out is left to a later `scrun delete`, which may come after the engine has
        removed the container's bundle: the spool keeps a copy of its config (the script
        reads its bind mounts from it, to copy back what the container wrote there), and
        the pending stage-out names the copy. A copy that cannot be made is logged."""
        kept = os.path.join(spool.path, "stage-config.json")
        try:
            with open(self.context.config_file, encoding="utf-8") as stream:
                write_atomically(kept, stream.read())
        except (OSError, ValueError) as exc:
            log.error(f"cannot keep {self.context.config_file} for a later stage-out: {exc}")
            return
        self.context.config_file = kept
        self.save(spool)

    @staticmethod
    def clear(spool: Spool) -> None:
        """Stage-out has run (well or not): nothing is pending any more."""
        try:  # noqa: SIM105
            os.unlink(spool.stage_file)
        except FileNotFoundError:
            pass

    def run(self, site: SiteConfig) -> None:
        """Run stage-out with a fresh copy of the script; a failure is logged (the caller's
        cleanup goes on)."""
        container = self.context.container_id
        try:
            stager = load_stager(self.script, self.slurm_conf, site)
            if stager is None:
                raise LuaError(f"{self.script} is gone")
            result = stager.stage_out(self.context, bundle=self.bundle, root_path=self.root_path)
        except ScrunError as exc:
            log.error(f"stage-out of container {container} failed: {exc.message}")
            return
        if not result.ok:
            log.error(f"stage-out of container {container} failed: {result.errors_in_one_line()}")
        else:
            log.verbose(f"staged out container {container} for its dead anchor")
