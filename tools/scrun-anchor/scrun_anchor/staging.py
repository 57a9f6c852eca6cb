"""The anchor's side of scrun.lua: load it once, run stage-in and stage-out.

No scrun.lua beside slurm.conf means no staging: the bundle is run where it is (the
compute nodes must see it, as with a shared filesystem or this machine's local cluster).
"""

from __future__ import annotations

import os
from typing import Any

from scrunlib import log
from scrunlib.bundle import Bundle
from scrunlib.errors import LuaError
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm, cluster_name
from scrunlib.spool import Spool
from scrunlib.state import ContainerState


class Staging:
    def __init__(self, slurm: Slurm, site: SiteConfig) -> None:
        self.slurm = slurm
        self.site = site
        self.stager: Any = None
        self.context: Any = None
        self.staged_in = False

    def load_script(self) -> None:
        from scrunlib.lua.stage import find_script

        path = find_script(self.slurm.slurm_conf)
        if not os.path.exists(path):
            log.verbose(f"no {path}: containers run without staging")
            return
        from scrunlib.lua.stage import Stager, SubprocessRunner

        runner = SubprocessRunner(
            srun=self.slurm.path("srun"),
            slurm_conf=self.slurm.slurm_conf,
            timeout=self.site.lua_timeout,
        )
        self.stager = Stager.load(
            path,
            runner=runner,
            cluster_name=cluster_name(self.slurm.slurm_conf),
            timeout=self.site.lua_timeout,
        )

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
        result = self.stager.stage_in(self.context)
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
        if not result.ok:
            log.error(f"stage-out failed: {result.message}")
