"""All checks, run in a fixed order over one analysed script."""

from __future__ import annotations

from collections.abc import Callable

from scrun_lua_check.analyses import Analyses, analyse_script
from scrun_lua_check.checks.commands import check_command_results
from scrun_lua_check.checks.failures import check_ignored_failures, check_nil_checks
from scrun_lua_check.checks.gpus import check_gpu_fields
from scrun_lua_check.checks.hooks import check_hooks
from scrun_lua_check.checks.modules import check_requires
from scrun_lua_check.checks.returns import check_chunk_return, check_hook_returns
from scrun_lua_check.checks.rootpath import check_root_path
from scrun_lua_check.checks.shell import check_shell_splices
from scrun_lua_check.checks.slurm_api import check_slurm_uses
from scrun_lua_check.checks.toplevel import check_placement
from scrun_lua_check.checks.variables import (
    check_globals,
    check_library_fields,
    check_shadowing,
    check_unused,
    check_unused_values,
)
from scrun_lua_check.context import LintContext

# Checks that read the facts only, then the ones that also read the shared analyses.
FACT_CHECKS: tuple[Callable[[LintContext], None], ...] = (
    check_globals,
    check_library_fields,
    check_shadowing,
    check_hooks,
    check_hook_returns,
    check_chunk_return,
    check_slurm_uses,
    check_nil_checks,
    check_root_path,
    check_requires,
    check_gpu_fields,
)
ANALYSIS_CHECKS: tuple[Callable[[LintContext, Analyses], None], ...] = (
    check_unused,
    check_unused_values,
    check_command_results,
    check_shell_splices,
    check_ignored_failures,
    check_placement,
)


def run_checks(ctx: LintContext) -> None:
    for check in FACT_CHECKS:
        check(ctx)
    analyses = analyse_script(ctx)
    for analysis_check in ANALYSIS_CHECKS:
        analysis_check(ctx, analyses)
