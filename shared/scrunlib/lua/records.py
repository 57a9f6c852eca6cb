"""What the scrun.lua code hands around: the hooks' arguments and what a hook did.

Plain data, no Lua: the anchor, scrun-stage and scrun-lua-check import these
without loading Lua.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from scrunlib import log

if TYPE_CHECKING:
    from scrunlib.bundle import Bundle
    from scrunlib.spool import Spool

CommandKind = Literal["allocator", "remote"]


@dataclass(frozen=True)
class LogRecord:
    """One line the script logged through slurm.log*: Slurm level (2 error .. 8 debug4)."""

    level: int
    message: str

    @property
    def level_name(self) -> str:
        """The level as scrun's logs spell it (`error`, `info`, `debug2`, ...)."""
        return log.LEVEL_NAMES.get(self.level, str(self.level))

    def as_dict(self) -> dict[str, str]:
        """The record in the JSON reports of scrun-stage and scrun-lua-check."""
        return {"level": self.level_name, "message": self.message}


@dataclass
class CommandRecord:
    """One command a hook ran, as shown by scrun-stage and kept in the anchor's log."""

    kind: CommandKind
    script: str
    status: int
    output: str
    seconds: float
    timed_out: bool = False


@dataclass(frozen=True)
class StageContext:
    """What the hooks are told about the container and its job."""

    container_id: str
    bundle: str  # bundle given to create (or the cwd it defaulted to)
    spool_dir: str  # <root>/<id>/
    config_file: str  # <bundle>/config.json, the original
    job_id: int
    user_id: int
    group_id: int
    job_env: Sequence[str]  # NAME=VALUE; also the environment of the script's commands
    root_path: str  # original absolute rootfs path (config.json root.path made absolute)
    orig_bundle: str | None = None  # --bundle as given; None when create defaulted to cwd

    @classmethod
    def for_container(
        cls,
        bundle: Bundle,
        spool: Spool,
        *,
        job_id: int,
        job_env: Mapping[str, str],
        orig_bundle: str | None,
    ) -> StageContext:
        """The hooks' arguments for a container of this process's user (its real ids, also
        inside rootless podman): the one way the anchor, scrun-stage and scrun-lua-check
        build them."""
        from scrunlib.userns import real_ids  # this module stays standard library only

        user_id, group_id = real_ids()
        return cls(
            container_id=spool.container_id,
            bundle=bundle.path,
            spool_dir=spool.dir_for_scripts,
            config_file=bundle.config_file,
            job_id=job_id,
            user_id=user_id,
            group_id=group_id,
            job_env=[f"{name}={value}" for name, value in job_env.items()],
            root_path=bundle.rootfs,
            orig_bundle=orig_bundle,
        )


@dataclass
class StageResult:
    """How loading the script (`hook` "load") or one hook went. `bundle` / `root_path` are
    the paths after the hook (what slurm.set_bundle_path / set_root_path chose)."""

    hook: str
    ok: bool
    status: int
    message: str
    bundle: str = ""
    root_path: str = ""
    commands: list[CommandRecord] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    seconds: float = 0.0
    traceback: str = ""
