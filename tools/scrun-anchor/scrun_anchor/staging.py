"""The anchor's side of scrun.lua: load it once, run stage-in and stage-out.

No scrun.lua beside slurm.conf means no staging: the bundle is run where it is (the
compute nodes must see it, as with a shared filesystem or this machine's local cluster).
"""

from __future__ import annotations

from scrunlib import log, stageout
from scrunlib.errors import LuaError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from scrunlib.lua.stage import StageContext, Stager
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.slurm import Slurm
    from scrunlib.spool import Spool

    from scrun_anchor.channel import ContainerStderr


def load_stager(slurm: Slurm, site: SiteConfig, stderr: ContainerStderr) -> Stager | None:
    """The site's scrun.lua, loaded (LuaError when it is broken); None when there is none.
    Its commands' notices (a long first import) go to the user on `stderr`."""
    from scrunlib.lua import find_script

    path = find_script(slurm.slurm_conf)
    stager = stageout.load_stager(path, slurm.slurm_conf, site, tell_user=stderr.notice)
    if stager is None:
        log.verbose(f"no {path}: containers run without staging")
    return stager


class ContainerStaging:
    """scrun.lua's hooks for one container: the loaded script and what it is told. From
    stage-in until stage-out has run, the spool keeps what `scrun delete` needs to stage
    out if we die first (scrunlib.stageout)."""

    def __init__(
        self,
        stager: Stager,
        context: StageContext,
        spool: Spool,
        slurm_conf: str,
        stderr: ContainerStderr,
    ) -> None:
        self.stager = stager
        self.context = context
        self.spool = spool
        self.slurm_conf = slurm_conf
        self.stderr = stderr

    def stage_in(self) -> tuple[str, str]:
        """Run slurm_scrun_stage_in; returns the (bundle, rootfs) the script chose."""
        self._pending(self.context.bundle, self.context.root_path)
        result = self.stager.stage_in(self.context)
        self._pending(
            result.bundle or self.context.bundle, result.root_path or self.context.root_path
        )
        if not result.ok:
            raise LuaError(f"stage-in failed: {result.message}")
        return result.bundle, result.root_path

    def before_start(self) -> None:
        """Run scrun_before_start (when the script has it): LuaError when it fails, and
        the step is not launched."""
        result = self.stager.before_start(self.context)
        if not result.ok:
            raise LuaError(f"start failed: {result.message}")

    def stage_out(self) -> None:
        """Run slurm_scrun_stage_out (also after a failed stage-in, so that the script can
        remove what it staged). A failure is logged and told on the container's stderr
        (held, so never said, for a container the engine never started): what the container
        wrote did not come back, and the script says where it is kept. Cleanup goes on."""
        try:
            result = self.stager.stage_out(self.context)
            failure = None if result.ok else result.errors_in_one_line()
        except LuaError as exc:
            failure = exc.message
        finally:
            stageout.PendingStageOut.clear(self.spool)
        if failure is not None:
            log.error(f"stage-out failed: {failure}")
            self.stderr.notice(f"scrun: error: stage-out failed: {failure}")

    def leave_pending(self) -> None:
        """Stage-out is left to `scrun delete`: what it needs stays in the spool, the
        container's config included (scrunlib.stageout.PendingStageOut.keep_config)."""
        pending = stageout.PendingStageOut.load(self.spool)
        if pending is not None:
            pending.keep_config(self.spool)

    def _pending(self, bundle: str, root_path: str) -> None:
        stageout.PendingStageOut(
            self.context,
            bundle=bundle,
            root_path=root_path,
            script=self.stager.path,
            slurm_conf=self.slurm_conf,
        ).save(self.spool)
