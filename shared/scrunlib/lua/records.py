"""What the scrun.lua code hands around: the hooks' arguments and what a hook did.

Plain data, no Lua: the anchor, scrun-stage and scrun-lua-check import these
without loading Lua. Plain classes, as everything the anchor imports for a site's scrun.lua
(no dataclasses or typing at run time: lint_tree/hotpath.py); `as_dict` is each one's form
in the JSON reports and files, fields in the order given here.
"""

from __future__ import annotations

from scrunlib import log

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Literal

    from scrunlib.bundle import Bundle
    from scrunlib.spool import Spool

    CommandKind = Literal["allocator", "remote"]


class LogRecord:
    """One line the script logged through slurm.log*: Slurm level (2 error .. 8 debug4)."""

    __slots__ = ("level", "message")

    def __init__(self, level: int, message: str) -> None:
        self.level = level
        self.message = message

    @property
    def level_name(self) -> str:
        """The level as scrun's logs spell it (`error`, `info`, `debug2`, ...)."""
        return log.LEVEL_NAMES.get(self.level, str(self.level))

    def as_dict(self) -> dict[str, str]:
        """The record in the JSON reports of scrun-stage and scrun-lua-check."""
        return {"level": self.level_name, "message": self.message}


class CommandRecord:
    """One command a hook ran, as shown by scrun-stage and kept in the anchor's log."""

    __slots__ = ("kind", "output", "script", "seconds", "status", "timed_out")

    def __init__(
        self,
        kind: CommandKind,
        script: str,
        status: int,
        output: str,
        seconds: float,
        timed_out: bool = False,
    ) -> None:
        self.kind = kind
        self.script = script
        self.status = status
        self.output = output
        self.seconds = seconds
        self.timed_out = timed_out

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "script": self.script,
            "status": self.status,
            "output": self.output,
            "seconds": self.seconds,
            "timed_out": self.timed_out,
        }


class StageContext:
    """What the hooks are told about the container and its job."""

    __slots__ = (
        "bundle",
        "config_file",
        "container_id",
        "group_id",
        "job_env",
        "job_id",
        "orig_bundle",
        "root_path",
        "spool_dir",
        "user_id",
    )

    def __init__(
        self,
        container_id: str,
        bundle: str,
        spool_dir: str,
        config_file: str,
        job_id: int,
        user_id: int,
        group_id: int,
        job_env: Sequence[str],
        root_path: str,
        orig_bundle: str | None = None,
    ) -> None:
        self.container_id = container_id
        self.bundle = bundle  # bundle given to create (or the cwd it defaulted to)
        self.spool_dir = spool_dir  # <root>/<id>/
        self.config_file = config_file  # <bundle>/config.json, the original
        self.job_id = job_id
        self.user_id = user_id
        self.group_id = group_id
        self.job_env = job_env  # NAME=VALUE; also the environment of the script's commands
        self.root_path = root_path  # original absolute rootfs path (root.path made absolute)
        self.orig_bundle = orig_bundle  # --bundle as given; None when create defaulted to cwd

    def as_dict(self) -> dict[str, object]:
        """The hooks' arguments by name (stage.json keeps them; `StageContext(**them)`)."""
        return {
            "container_id": self.container_id,
            "bundle": self.bundle,
            "spool_dir": self.spool_dir,
            "config_file": self.config_file,
            "job_id": self.job_id,
            "user_id": self.user_id,
            "group_id": self.group_id,
            "job_env": list(self.job_env),
            "root_path": self.root_path,
            "orig_bundle": self.orig_bundle,
        }

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


class StageResult:
    """How loading the script (`hook` "load") or one hook went. `bundle` / `root_path` are
    the paths after the hook (what slurm.set_bundle_path / set_root_path chose)."""

    __slots__ = (
        "bundle",
        "commands",
        "hook",
        "logs",
        "message",
        "ok",
        "root_path",
        "seconds",
        "status",
        "traceback",
    )

    def __init__(
        self,
        hook: str,
        ok: bool,
        status: int,
        message: str,
        bundle: str = "",
        root_path: str = "",
        commands: list[CommandRecord] | None = None,
        logs: list[LogRecord] | None = None,
        seconds: float = 0.0,
        traceback: str = "",
    ) -> None:
        self.hook = hook
        self.ok = ok
        self.status = status
        self.message = message
        self.bundle = bundle
        self.root_path = root_path
        self.commands: list[CommandRecord] = [] if commands is None else commands
        self.logs: list[LogRecord] = [] if logs is None else logs
        self.seconds = seconds
        self.traceback = traceback

    def errors_in_one_line(self) -> str:
        """Every error line the hook logged, in one line: for a failed stage-out of the
        shipped scripts, what failed, then where the container's files are kept (the
        message names only the last). The message when it logged none."""
        said = [record.message for record in self.logs if record.level <= log.ERROR]
        return "; ".join(" ".join(line.split()) for line in said or [self.message])

    def as_dict(self) -> dict[str, object]:
        """The result in the JSON reports of scrun-stage and scrun-lua-check."""
        return {
            "hook": self.hook,
            "ok": self.ok,
            "status": self.status,
            "message": self.message,
            "bundle": self.bundle,
            "root_path": self.root_path,
            "commands": [command.as_dict() for command in self.commands],
            "logs": [record.as_dict() for record in self.logs],
            "seconds": self.seconds,
            "traceback": self.traceback,
        }
