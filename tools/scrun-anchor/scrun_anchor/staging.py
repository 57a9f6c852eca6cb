"""The anchor's side of scrun.lua: load it once, run stage-in and stage-out.

No scrun.lua beside slurm.conf means no staging: the bundle is run where it is (the
compute nodes must see it, as with a shared filesystem or this machine's local cluster).
"""

from __future__ import annotations

import os

from scrunlib import log
from scrunlib.errors import LuaError
from scrunlib.siteconfig import SiteConfig
from scrunlib.slurm import Slurm, cluster_name

TYPE_CHECKING = False  # typing costs the anchor ~5 ms and 0.7 MB
if TYPE_CHECKING:
    from scrunlib.lua.stage import StageContext, Stager


def load_stager(slurm: Slurm, site: SiteConfig) -> Stager | None:
    """The site's scrun.lua, loaded (LuaError when it is broken); None when there is none."""
    from scrunlib.lua import find_script

    path = find_script(slurm.slurm_conf)
    if not os.path.exists(path):
        log.verbose(f"no {path}: containers run without staging")
        return None
    from scrunlib.lua.stage import Stager, SubprocessRunner

    runner = SubprocessRunner(
        srun=slurm.path("srun"),
        slurm_conf=slurm.slurm_conf,
        timeout=site.lua_timeout,
    )
    return Stager.load(
        path,
        runner=runner,
        cluster_name=cluster_name(slurm.slurm_conf),
        timeout=site.lua_timeout,
    )


class ContainerStaging:
    """scrun.lua's hooks for one container: the loaded script and what it is told."""

    def __init__(self, stager: Stager, context: StageContext) -> None:
        self.stager = stager
        self.context = context

    def stage_in(self) -> tuple[str, str]:
        """Run slurm_scrun_stage_in; returns the (bundle, rootfs) the script chose."""
        result = self.stager.stage_in(self.context)
        if not result.ok:
            raise LuaError(f"stage-in failed: {result.message}")
        return result.bundle, result.root_path

    def stage_out(self) -> None:
        """Run slurm_scrun_stage_out (also after a failed stage-in, so that the script can
        remove what it staged); a failure is logged, cleanup goes on."""
        try:
            result = self.stager.stage_out(self.context)
        except LuaError as exc:
            log.error(f"stage-out failed: {exc.message}")
            return
        if not result.ok:
            log.error(f"stage-out failed: {result.message}")
