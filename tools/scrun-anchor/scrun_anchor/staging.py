"""The anchor's side of scrun.lua: load it once, run stage-in and stage-out.

No scrun.lua beside slurm.conf means no staging: the bundle is run where it is (the
compute nodes must see it, as with a shared filesystem or this machine's local cluster).
"""

from __future__ import annotations

from typing import Any

from scrunlib import log
from scrunlib.bundle import Bundle
from scrunlib.errors import LuaError
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm
from scrunlib.spool import Spool
from scrunlib.stageout import PendingStageOut, load_stager
from scrunlib.state import ContainerState


class Staging:
    def __init__(self, slurm: Slurm, site: SiteConfig) -> None:
        self.slurm = slurm
        self.site = site
        self.script = ""
        self.stager: Any = None
        self.context: Any = None
        self.staged_in = False

    def load_script(self) -> None:
        from scrunlib.lua.stage import find_script

        self.script = find_script(self.slurm.slurm_conf)
        self.stager = load_stager(self.script, self.slurm.slurm_conf, self.site)
        if self.stager is None:
            log.verbose(f"no {self.script}: containers run without staging")

    def stage_in(
        self,
        state: ContainerState,
        bundle: Bundle,
        submission_bundle: str | None,
        spool: Spool,
        job_env: dict[str, str],
    ) -> tuple[str, str] | None:
        """Run slurm_scrun_stage_in; returns the (bundle, rootfs) the script chose."""
        if self.stager is None:
            return None
        from scrunlib.lua.stage import StageContext

        assert state.job_id is not None
        self.context = StageContext.for_container(
            bundle, spool, job_id=state.job_id, job_env=job_env, orig_bundle=submission_bundle
        )
        self.staged_in = True
        self._pending(spool, self.context.bundle, self.context.root_path)
        result = self.stager.stage_in(self.context)
        self._pending(
            spool, result.bundle or self.context.bundle, result.root_path or self.context.root_path
        )
        if not result.ok:
            raise LuaError(f"stage-in failed: {result.message}")
        return result.bundle, result.root_path

    def stage_out(self, state: ContainerState, spool: Spool) -> None:
        """Run slurm_scrun_stage_out; a failure is logged, cleanup goes on."""
        if self.stager is None or self.context is None:
            return
        try:
            result = self.stager.stage_out(self.context)
        except LuaError as exc:
            log.error(f"stage-out failed: {exc.message}")
            return
        finally:
            PendingStageOut.clear(spool)
        if not result.ok:
            log.error(f"stage-out failed: {result.message}")

    def _pending(self, spool: Spool, bundle: str, root_path: str) -> None:
        """Keep what `scrun delete` needs to stage out if we die before stage_out."""
        assert self.context is not None
        PendingStageOut(
            self.context,
            bundle=bundle,
            root_path=root_path,
            script=self.script,
            slurm_conf=self.slurm.slurm_conf,
        ).save(spool)
