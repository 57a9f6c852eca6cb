"""What every command needs after the global options: the root, logging, Slurm lookup."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from scrunlib import siteconfig
from scrunlib.log import LogSettings
from scrunlib.spool import Spool, default_root, validate_id


@dataclass
class Context:
    root_option: str | None
    slurm_conf_option: str | None
    log_settings: LogSettings
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @cached_property
    def site(self) -> siteconfig.SiteConfig:
        return siteconfig.load(self.environ)

    @cached_property
    def root(self) -> str:
        if self.root_option:
            return os.path.abspath(self.root_option)
        return default_root(self.environ, self.site.root)

    @property
    def slurm_conf(self) -> str:
        return self.site.slurm_conf_path(self.slurm_conf_option, self.environ)

    def spool(self, container_id: str) -> Spool:
        return Spool(self.root, validate_id(container_id))
