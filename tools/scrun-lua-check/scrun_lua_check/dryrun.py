"""--dry-run: load the script and run both hooks against a real bundle, and say what happened.

It uses scrun's own Lua runtime (scrunlib.lua), so the `slurm` table, argument types and
return handling are exactly what the anchor would see. Commands go to a RecordingRunner
that answers them as a node would (scrun_lua_check.answers) unless --execute; file writes,
os.execute, io.popen, os.remove and os.rename go through the sandbox. The bundle's
config.json is only read; every file the script writes that holds JSON is compared with it,
which shows the config changes whether the script writes the new config.json next to the old
one, on scratch, or over it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field

from scrunlib import bundle as bundles
from scrunlib import jobenv, log
from scrunlib.errors import LuaError, ScrunError, UsageError
from scrunlib.lua import api
from scrunlib.lua.stage import (
    CommandRunner,
    LogRecord,
    RecordingRunner,
    StageContext,
    Stager,
    StageResult,
    SubprocessRunner,
)
from scrunlib.spool import Spool, validate_id

from scrun_lua_check.answers import Answer, NodeAnswers
from scrun_lua_check.jsondiff import Change, diff
from scrun_lua_check.sandbox import FileSandbox, SideEffect


@dataclass(frozen=True)
class DryRunOptions:
    bundle: str
    container_id: str = "scrun-lua-check"
    job_id: int = 1
    cluster_name: str = ""
    timeout: float = 60.0
    execute: bool = False
    answers: tuple[Answer, ...] = ()  # configured answers to commands (without --execute)


@dataclass
class FileWrite:
    path: str
    size: int
    changes: list[Change] | None  # against the bundle's config.json; None: not a JSON object

    def as_dict(self) -> dict[str, object]:
        changes = None if self.changes is None else [c.as_dict() for c in self.changes]
        return {"path": self.path, "size": self.size, "config_changes": changes}


class Phase(StageResult):
    """Loading the chunk (`hook` "load"), stage_in or stage_out, and what the sandbox saw."""

    __slots__ = ("effects", "notes", "writes")

    def __init__(
        self, hook: str, ok: bool, status: int, message: str, logs: list[LogRecord] | None = None
    ) -> None:
        super().__init__(hook, ok, status, message, logs=logs)
        self.effects: list[SideEffect] = []
        self.writes: list[FileWrite] = []
        self.notes: list[str] = []  # suspicious things seen, not failures

    @classmethod
    def of(cls, result: StageResult) -> Phase:
        phase = cls(result.hook, result.ok, result.status, result.message)
        for name in StageResult.__slots__:
            setattr(phase, name, getattr(result, name))
        return phase

    @property
    def name(self) -> str:
        return self.hook

    @property
    def details(self) -> str:
        """The message, and the Lua traceback when there is one."""
        return self.message + (f"\n{self.traceback}" if self.traceback else "")

    def as_dict(self) -> dict[str, object]:
        data = super().as_dict()
        del data["hook"], data["traceback"]
        data["message"] = self.details
        data["effects"] = [asdict(effect) for effect in self.effects]
        data["writes"] = [write.as_dict() for write in self.writes]
        data["notes"] = list(self.notes)
        return {"name": self.name, **data}


@dataclass
class DryRunReport:
    script: str
    context: StageContext
    executed: bool
    phases: list[Phase] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return not all(phase.ok for phase in self.phases)

    def as_dict(self) -> dict[str, object]:
        return {
            "script": self.script,
            "context": self.context.as_dict(),
            "executed": self.executed,
            "failed": self.failed,
            "phases": [phase.as_dict() for phase in self.phases],
        }


def read_config(bundle: str) -> dict[str, object]:
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, "rb") as stream:
            config = json.load(stream)
    except OSError as exc:
        raise UsageError(f"--bundle: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--bundle: {path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--bundle: {path} is not a JSON object")
    return config


def stage_context(options: DryRunOptions, config: dict[str, object], root: str) -> StageContext:
    """The hooks' arguments, with the job env the anchor would build (scrunlib.jobenv); with
    no real job, its SLURM_* part is only the job id and cluster name."""
    try:
        bundle = bundles.parse(os.path.abspath(options.bundle), config)
    except ScrunError as exc:
        raise UsageError(f"--bundle: {exc.message}") from None
    container_spool = Spool(root, options.container_id)
    slurm_part = {"SLURM_JOB_ID": str(options.job_id), "SLURM_JOBID": str(options.job_id)}
    if options.cluster_name:
        slurm_part["SLURM_CLUSTER_NAME"] = options.cluster_name
    job_env = jobenv.container_job_env(
        slurm_part=slurm_part,
        bundle=bundle,
        submission_bundle=bundle.path,
        spool=container_spool,
        version=None,
    )
    return StageContext.for_container(
        bundle, container_spool, job_id=options.job_id, job_env=job_env, orig_bundle=bundle.path
    )


def dry_run(script: str, options: DryRunOptions) -> DryRunReport:
    validate_id(options.container_id)  # it becomes part of paths, in the hooks and here
    config = read_config(options.bundle)
    log.configure(log.LogSettings(stderr=0, file=0, program="scrun-lua-check"))  # we show them
    with tempfile.TemporaryDirectory(prefix="scrun-lua-check-") as temp:
        context = stage_context(options, config, os.path.join(temp, "spool"))
        os.makedirs(context.spool_dir)
        sandbox = FileSandbox(None if options.execute else os.path.join(temp, "files"))
        runner: CommandRunner = (
            SubprocessRunner(timeout=options.timeout)
            if options.execute
            else RecordingRunner(NodeAnswers(options.answers, context.user_id))
        )
        report = DryRunReport(script, context, options.execute)
        try:
            stager = Stager.load(
                script,
                runner=runner,
                cluster_name=options.cluster_name,
                timeout=options.timeout,
                prepare=sandbox.install,
            )
        except LuaError as exc:
            report.phases.append(finish(Phase("load", False, 0, exc.message), sandbox, config))
            return report
        load = Phase("load", True, 0, "loaded", logs=stager.load_logs)
        report.phases.append(finish(load, sandbox, config))
        hooks = [stager.stage_in, stager.stage_out]
        if stager.defines(api.BEFORE_START):
            hooks.insert(1, stager.before_start)
        for hook in hooks:
            report.phases.append(finish(Phase.of(hook(context)), sandbox, config))
    return report


def finish(phase: Phase, sandbox: FileSandbox, config: dict[str, object]) -> Phase:
    """Add what the sandbox saw during the phase: files written, other side effects."""
    contents, phase.effects = sandbox.take()
    for path, data in contents.items():
        try:
            document = json.loads(data)
        except ValueError:
            document = None
        changes = diff(config, document) if isinstance(document, dict) else None
        phase.writes.append(FileWrite(path, len(data), changes))
    shown: list[str] = []
    for path in sorted(set(empty_component_paths(phase)), key=len):
        if not any(path.startswith(f"{prefix}/") for prefix in shown):
            shown.append(path)  # one note for a directory and the paths below it
    phase.notes = [f"path with an empty component (an empty value spliced in?): {p}" for p in shown]
    return phase


# An absolute path in a text (not the `//` of `scheme://`): up to a space, quote or operator.
PATH_IN_TEXT = re.compile(r"(?<![\w:/.~-])/[^\s'\"`;&|<>()$]*")


def empty_component_paths(phase: Phase) -> list[str]:
    """Paths with `//` in them that the phase used: `/home//containers` is what a script
    makes of an empty user name."""
    texts = [phase.bundle, phase.root_path]
    texts += [command.script for command in phase.commands]
    texts += [effect.detail for effect in phase.effects]
    for write in phase.writes:
        texts.append(write.path)
        texts += [c.new for c in write.changes or [] if isinstance(c.new, str)]
    return [
        path.rstrip("/")
        for text in texts
        for path in PATH_IN_TEXT.findall(text)
        if "//" in path.rstrip("/")
    ]


def render_dry_run(report: DryRunReport) -> str:
    ctx = report.context
    how = (
        "commands were run and files written (--execute)"
        if report.executed
        else "commands and file changes were recorded, not performed"
    )
    lines = [
        f"dry run of {report.script} with bundle {ctx.bundle}",
        f"  container {ctx.container_id}, job {ctx.job_id}, uid {ctx.user_id}, gid {ctx.group_id};"
        f" {how}",
    ]
    paths = (ctx.bundle, ctx.root_path)
    for phase in report.phases:
        lines.append("")
        lines.extend(render_phase(phase, report.executed, paths))
        if phase.name != "load":
            paths = (phase.bundle, phase.root_path)
    return "\n".join(lines)


def render_phase(phase: Phase, executed: bool, paths: tuple[str, str]) -> list[str]:
    """One phase; `paths` are the bundle and root path before it."""
    verdict = "ok" if phase.ok else "FAILED"
    if phase.name == "load":
        lines = [f"load: {verdict}"]
    else:
        lines = [f"{phase.name}: returned {phase.status} ({verdict}) in {phase.seconds:.3f} s"]
    if not phase.ok or not phase.message.endswith(("succeeded", "loaded")):
        lines += [f"  {line}" for line in phase.details.splitlines()]
    lines += [f"  log {r.level_name}: {r.message}" for r in phase.logs]
    for command in phase.commands:
        outcome = "recorded" if not executed else f"exit {command.status}"
        lines.append(
            f"  {command.kind}_command ({outcome}, {command.seconds:.3f} s): {command.script}"
        )
        lines += [f"    | {line}" for line in command.output.splitlines()]
    lines += [f"  {effect.kind}: {effect.detail}" for effect in phase.effects]
    lines += [f"  note: {note}" for note in phase.notes]
    if phase.name != "load":
        for label, before, after in zip(
            ("bundle", "root path"), paths, (phase.bundle, phase.root_path), strict=True
        ):
            change = f"{before} -> {after}" if after != before else f"{after} (unchanged)"
            lines.append(f"  {label}: {change}")
    for write in phase.writes:
        if write.changes is None:
            lines.append(f"  wrote {write.path} ({write.size} bytes)")
            continue
        lines.append(
            f"  wrote {write.path} ({write.size} bytes, JSON):"
            f" {len(write.changes)} changes from the bundle's config.json"
        )
        lines += [f"    {change.text()}" for change in write.changes]
    return lines
