"""What every command needs after the global options: the root, logging, Slurm lookup.

The site configuration (TOML) is read only by commands that need Slurm: the hot path
(`state`, `kill`, `start`) finds everything from the root alone.
"""

from __future__ import annotations

import os

from scrunlib.log import LogSettings
from scrunlib.ownership import check_private_dir
from scrunlib.spool import SITE_CONFIG_CACHE, Spool, default_root, validate_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrunlib.siteconfig import SiteConfig


class CommandContext:
    """What `scrun`'s global options and environment give every runtime command."""

    def __init__(
        self,
        root_option: str | None,
        slurm_conf_option: str | None,
        log_settings: LogSettings,
        environ: Mapping[str, str],
    ) -> None:
        self.root_option = root_option
        self.slurm_conf_option = slurm_conf_option
        self.log_settings = log_settings
        self.environ = environ
        self._site: SiteConfig | None = None
        self._root: str | None = None

    @property
    def site(self) -> SiteConfig:
        """Read on first use (only commands that need Slurm do)."""
        if self._site is None:
            from scrunlib import siteconfig

            cache = os.path.join(self.root, SITE_CONFIG_CACHE)
            self._site = siteconfig.load(self.environ, cache=cache)
        return self._site

    @property
    def root(self) -> str:
        """The runtime root, refused when another user could have planted or changed it
        (checked on first use)."""
        if self._root is None:
            option = self.root_option
            root = os.path.abspath(option) if option else default_root(self.environ)
            check_private_dir(root, "runtime root")
            self._root = root
        return self._root

    @property
    def slurm_conf(self) -> str:
        return self.site.slurm_conf_path(self.slurm_conf_option, self.environ)

    def spool(self, container_id: str) -> Spool:
        spool = Spool(self.root, validate_id(container_id))
        check_private_dir(spool.path, "container directory")
        return spool
