"""scrun-stage: run scrun.lua's stage-in / stage-out by hand and show exactly what happened.

For a site admin writing or debugging scrun.lua: no podman, no container, just the hooks
against a bundle and a job, then a report (paths chosen, config.json changes, every command
with its output, every log line, timings). Not a hot path, so argparse and eager imports;
its stderr (errors, and the live log with -v) is loguru's (scrunlib.admin_output).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import scrunlib
from scrunlib import admin_output, jobenv, log, siteconfig, spool
from scrunlib import bundle as bundles
from scrunlib.errors import InvalidInput, ScrunError, UsageError, internal_error
from scrunlib.lua import api
from scrunlib.lua.stage import (
    LogRecord,
    StageContext,
    Stager,
    StageResult,
    find_script,
)
from scrunlib.ownership import check_job_owner
from scrunlib.slurm import Slurm, cluster_name
from scrunlib.slurm_version import SlurmVersion

from scrun_stage import cache_command

EXIT_OK, EXIT_FAILED = 0, 1

DESCRIPTION = """\
Run the site's scrun.lua stage functions for a bundle, outside podman, and report what
they did: the bundle and rootfs paths they chose, the config.json changes, each command
with its exit status and output, every log line, and how long each part took.

Commands run for real (rsync, mkdir, srun ...), as the invoking user.
"""

EPILOG = """\
job:
  --job-id N uses an existing job (default: $SLURM_JOB_ID); --allocate gets a new one
  as scrun does (salloc holds it) and cancels it afterwards unless --keep-job is given.

exit status:
  0  the stage function(s) succeeded
  1  a stage function failed, or Slurm refused the allocation
  2  usage error (unknown option, bad --bundle, no job)
  3  scrun.lua could not be loaded (missing, syntax error, missing hook)
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit status 2), and an option is
    only its whole name (`--time 0` is no `--timeout 0`), in each subcommand too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        admin_output.error(self.prog, message)
        self.exit(UsageError.exit_code)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--bundle", required=True, metavar="DIR", help="the OCI bundle (directory with config.json)"
    )
    common.add_argument(
        "--id", metavar="ID", help="container id passed to the hooks (default: scrun-stage-<pid>)"
    )
    job = common.add_mutually_exclusive_group()
    job.add_argument("--job-id", type=int, metavar="N", help="run against this existing job")
    job.add_argument("--allocate", action="store_true", help="allocate a new job for the run")
    common.add_argument(
        "--keep-job", action="store_true", help="with --allocate: leave the job running afterwards"
    )
    common.add_argument(
        "--salloc-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="with --allocate: extra salloc option (repeatable), e.g. --salloc-arg=--qos=low",
    )
    common.add_argument(
        "--script",
        metavar="PATH",
        help="candidate scrun.lua (default: scrun.lua beside slurm.conf)",
    )
    common.add_argument(
        "-f",
        "--slurm-conf",
        metavar="PATH",
        help="slurm.conf (default: $SLURM_CONF, then the site config)",
    )
    common.add_argument(
        "--root", metavar="DIR", help="runtime root; the hooks' spool_dir is <root>/<id>/"
    )
    common.add_argument(
        "--timeout",
        type=siteconfig.seconds,
        metavar="SECONDS",
        help="time limit per hook (default: the site's lua_timeout)",
    )
    common.add_argument(
        "--format", choices=("text", "json"), default="text", help="report format (default: text)"
    )
    common.add_argument(
        "--debug", action="store_true", help="print the traceback of an internal error"
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="also log live to stderr (-v info, -vv verbose, -vvv debug ...)",
    )

    parser = _Parser(
        prog="scrun-stage",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"scrun-stage {scrunlib.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    staged = _Parser(add_help=False)
    staged.add_argument(
        "--staged-bundle", metavar="DIR", help="bundle that stage-in produced (required for `out`)"
    )
    staged.add_argument(
        "--staged-root",
        metavar="DIR",
        help="rootfs that stage-in produced (default: root.path of the "
        "staged bundle's config.json)",
    )
    for name, parents, text in (
        ("in", [common], "run slurm_scrun_stage_in"),
        ("out", [common, staged], "run slurm_scrun_stage_out for a bundle staged earlier"),
        (
            "both",
            [common],
            "stage in, then stage out, as the anchor does around a container (with"
            " scrun_before_start between when the script has it)",
        ),
    ):
        commands.add_parser(
            name,
            parents=parents,
            help=text,
            description=text,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    cache_command.add_parser(commands)
    return parser


@dataclass
class StageReport:
    """One hook's result plus what scrun-stage saw around it."""

    result: StageResult
    bundle_before: str
    root_before: str
    config_diff: str | None = None  # stage-in only


@dataclass
class Report:
    script: str
    load_seconds: float
    load_logs: list[LogRecord]
    job_id: int
    job_env: list[str] = field(default_factory=list)
    job_env_source: str = ""
    stages: list[StageReport] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return EXIT_OK if all(stage.result.ok for stage in self.stages) else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    admin_output.configure("scrun-stage", _stderr_level(args.verbose))
    try:
        if args.command == "cache":
            return run_cache(args)
        report = run(args)
    except ScrunError as exc:  # UsageError 2, LuaLoadError 3, the others 1
        admin_output.error("scrun-stage", exc.message)
        return exc.exit_code
    except Exception as exc:  # a bug: one line, the traceback only with --debug
        error = internal_error(exc, traceback=args.debug)
        admin_output.error("scrun-stage", error.message)
        return error.exit_code
    sys.stdout.write(render_json(report) if args.format == "json" else render_text(report))
    return report.exit_status


def run_cache(args: argparse.Namespace) -> int:
    """`scrun-stage cache ACTION`: its report on stdout (verify's too when it fails)."""
    script = args.script
    settings_given = args.scratch and (args.node_local or not args.nodes)
    if not settings_given and not script:
        script = find_script(siteconfig.load().slurm_conf_path(args.slurm_conf, os.environ))
    try:
        report, status = cache_command.run(args, script or "")
    except cache_command.VerifyFailed as exc:
        sys.stdout.write(exc.report)
        raise
    sys.stdout.write(report)
    return status


def run(args: argparse.Namespace) -> Report:
    site = siteconfig.load()
    slurm_conf = site.slurm_conf_path(args.slurm_conf, os.environ)
    try:
        bundle = bundles.load(args.bundle)
        container_id = spool.validate_id(args.id or f"scrun-stage-{os.getpid()}")
    except ScrunError as exc:
        raise UsageError(exc.message) from None
    staged_bundle, staged_root = _staged_paths(args)
    job_id = _existing_job(args)
    script = args.script or find_script(slurm_conf)
    timeout = args.timeout or site.lua_timeout
    start = time.monotonic()
    stager = Stager.for_slurm(script, slurm_conf=slurm_conf, timeout=timeout)
    load_seconds = time.monotonic() - start
    slurm = Slurm(site, slurm_conf)
    allocated = job_id is None
    salloc_part = None
    if job_id is None:
        allocation = slurm.allocate("scrun-stage", container_id, args.salloc_arg)
        job_id, salloc_part = allocation.job_id, allocation.variables
    try:
        container_spool = spool.Spool(args.root or spool.default_root(os.environ), container_id)
        job_env, job_env_source = job_env_and_source(
            bundle, container_spool, job_id, slurm, salloc_part
        )
        ctx = StageContext.for_container(
            bundle, container_spool, job_id=job_id, job_env=job_env, orig_bundle=bundle.path
        )
        report = Report(
            script, load_seconds, stager.load_logs, job_id, list(ctx.job_env), job_env_source
        )
        if args.command in ("in", "both"):
            report.stages.append(_stage_in(stager, ctx))
        staged_in = args.command == "both" and report.stages[-1].result.ok
        if staged_in and stager.defines(api.BEFORE_START):  # as the anchor does at start
            before = (stager.bundle, stager.root_path)
            report.stages.append(StageReport(stager.before_start(ctx), *before))
        if args.command in ("out", "both"):
            before_bundle = staged_bundle or stager.bundle
            before_root = staged_root or stager.root_path
            result = stager.stage_out(ctx, bundle=staged_bundle, root_path=staged_root)
            report.stages.append(StageReport(result, before_bundle, before_root))
        return report
    finally:
        if allocated and not args.keep_job:
            slurm.cancel(job_id)


def _stage_in(stager: Stager, ctx: StageContext) -> StageReport:
    """Stage in and diff config.json: the original against the one in the new bundle (read
    before the hook runs, since a script may also rewrite it in place)."""
    original = _read(ctx.config_file)
    result = stager.stage_in(ctx)
    staged_file = os.path.join(result.bundle, "config.json")
    staged = _read(staged_file)
    if staged is None:
        diff = f"(no config.json in {result.bundle})\n"
    else:
        diff = "".join(
            difflib.unified_diff(
                _normalized(original or "").splitlines(keepends=True),
                _normalized(staged).splitlines(keepends=True),
                fromfile=ctx.config_file,
                tofile=staged_file,
            )
        )
    return StageReport(result, ctx.bundle, ctx.root_path, diff)


def _staged_paths(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """--staged-bundle/--staged-root for `out`; the rootfs defaults to root.path there."""
    if args.command != "out":
        return None, None
    if not args.staged_bundle:
        raise UsageError("`out` needs --staged-bundle (the bundle stage-in produced)")
    if args.staged_root:
        return args.staged_bundle, args.staged_root
    try:
        return args.staged_bundle, bundles.load(args.staged_bundle).rootfs
    except ScrunError as exc:
        raise UsageError(f"{exc.message}; give --staged-root") from None


def _existing_job(args: argparse.Namespace) -> int | None:
    """--job-id, else $SLURM_JOB_ID; None means allocate (only when --allocate)."""
    if args.job_id is not None:
        return int(args.job_id)
    if args.allocate:
        return None
    from_env = os.environ.get("SLURM_JOB_ID", "")
    if from_env.isdigit():
        return int(from_env)
    raise UsageError("no job: give --job-id N, --allocate, or run inside a job")


def job_env_and_source(
    bundle: bundles.Bundle,
    container_spool: spool.Spool,
    job_id: int,
    slurm: Slurm,
    salloc_part: dict[str, str] | None = None,
) -> tuple[dict[str, str], str]:
    """The job env the hooks and their commands see, built by the anchor's own code
    (scrunlib.jobenv), so it is exactly what the anchor would pass; nothing of this shell's
    environment. Its SLURM_* part: for a job allocated here, `salloc_part` (what salloc
    gave the job holder, as for the anchor's own job); for a given job, from its record, as
    for a job the anchor joins. Without a job record (no cluster reachable) only
    SLURM_JOB_ID/SLURM_JOBID/SLURM_CLUSTER_NAME stand in for the record's variables; a job
    the cluster says does not exist is an error, before any hook runs.
    Returns the env and where its SLURM_* part came from, for the report."""
    if salloc_part is not None:
        slurm_part, source = salloc_part, f"salloc of job {job_id}"
    else:
        slurm_part, source = _recorded_slurm_part(job_id, slurm)
    try:
        version: SlurmVersion | None = slurm.version()
    except ScrunError as exc:
        log.verbose(f"Slurm version unknown ({exc.message}): no SLURM_CONTAINER_ID")
        version = None
    env = jobenv.container_job_env(
        slurm_part=slurm_part,
        bundle=bundle,
        submission_bundle=bundle.path,
        spool=container_spool,
        version=version,
    )
    return env, source


def _recorded_slurm_part(job_id: int, slurm: Slurm) -> tuple[dict[str, str], str]:
    """The job's SLURM_* variables from its record, and where they came from."""
    try:
        record = slurm.job_record(job_id)
    except ScrunError as exc:
        if "Invalid job id" in exc.message:  # the cluster answered: no such job
            raise InvalidInput(
                f"job {job_id} does not exist: give a job of yours that runs, or --allocate"
            ) from None
        log.verbose(f"no job record for job {job_id}: {exc.message}")
        slurm_part = {"SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id)}
        if name := cluster_name(slurm.slurm_conf):
            slurm_part["SLURM_CLUSTER_NAME"] = name
        source = f"no job record ({exc.message}): SLURM_* variables incomplete"
    else:
        check_job_owner(job_id, record)  # never stage into another user's job
        slurm_part = jobenv.slurm_variables(record, cluster_name(slurm.slurm_conf))
        source = f"scontrol show job {job_id}"
    return slurm_part, source


# -- reports -----------------------------------------------------------------------------


def render_text(report: Report) -> str:
    lines = [
        f"script      {report.script} (loaded in {report.load_seconds:.3f} s)",
        f"job         {report.job_id}",
        f"job env     {len(report.job_env)} variable(s), from {report.job_env_source}",
    ]
    lines += [f"  {entry}" for entry in report.job_env]
    lines += [f"load log    {r.level_name}: {r.message}" for r in report.load_logs]
    for stage in report.stages:
        result = stage.result
        verdict = "ok" if result.ok else "FAILED"
        lines += [
            "",
            f"== {result.hook}: {verdict} (status {result.status}, {result.seconds:.3f} s)",
            f"message     {result.message}",
            f"bundle      {_change(stage.bundle_before, result.bundle)}",
            f"root path   {_change(stage.root_before, result.root_path)}",
            f"commands    {len(result.commands)}",
        ]
        for number, command in enumerate(result.commands, 1):
            timed_out = ", timed out" if command.timed_out else ""
            lines.append(
                f"  [{number}] {command.kind}  exit {command.status}  "
                f"{command.seconds:.3f} s{timed_out}"
            )
            lines += _indented(command.script, "      $ ")
            lines += _indented(command.output.rstrip("\n"), "      | ")
        lines.append(f"log         {len(result.logs)} line(s)")
        lines += [f"  {record.level_name}: {record.message}" for record in result.logs]
        if result.traceback:
            lines += ["traceback", *_indented(result.traceback, "  ")]
        if stage.config_diff is not None:
            lines.append("config.json diff")
            lines += _indented(stage.config_diff.rstrip("\n") or "(unchanged)", "  ")
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    stages = []
    for stage in report.stages:
        entry = stage.result.as_dict()
        entry["bundle_before"] = stage.bundle_before
        entry["root_path_before"] = stage.root_before
        entry["config_diff"] = stage.config_diff
        stages.append(entry)
    data = {
        "script": report.script,
        "load_seconds": report.load_seconds,
        "load_logs": [record.as_dict() for record in report.load_logs],
        "job_id": report.job_id,
        "job_env": report.job_env,
        "job_env_source": report.job_env_source,
        "stages": stages,
        "exit_status": report.exit_status,
    }
    return json.dumps(data, indent=2) + "\n"


def _change(before: str, after: str) -> str:
    return before if before == after else f"{before} -> {after}"


def _indented(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.splitlines()] if text else []


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as stream:
            return stream.read()
    except OSError:
        return None


def _normalized(text: str) -> str:
    """Compare JSON by content: key order and layout of the original are podman's choice."""
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    except ValueError:
        return text


def _stderr_level(verbose: int) -> int:
    return min(log.INFO + verbose - 1, log.LEVELS["debug5"]) if verbose else 0


if __name__ == "__main__":
    sys.exit(main())
