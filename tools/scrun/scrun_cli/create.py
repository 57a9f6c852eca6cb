"""`scrun create`: validate the bundle, then start the container's anchor and wait until it
reports the container created (job allocated, nodes ready, stage-in done) or failed.

The anchor is our forked child (it runs scrun_anchor's main, not a new program): conmon and
containerd-shim are subreapers and wait for the pid in `--pid-file`, which is the anchor's.
It keeps our stdin/stdout/stderr for the container. On failure nothing is left: the anchor
ends any job it got, we remove the spool directory.
"""

from __future__ import annotations

import os
import time

from scrunlib import bundle as bundles
from scrunlib import engine_gpus, engine_resources
from scrunlib.errors import InvalidInput, ScrunError
from scrunlib.launch import Launch, anchor_logging, read_report
from scrunlib.options import Opt, one_id, parse, usage_text
from scrunlib.processes import Child, fork
from scrunlib.state import ContainerState
from scrunlib.userns import real_ids
from scrunlib.users import user_name

from scrun_cli.context import CommandContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

OPTIONS = (
    Opt("bundle", "b", value=True, metavar="DIR", help="bundle (default: the current directory)"),
    Opt(
        "config",
        value=True,
        metavar="FILE",
        help="use FILE (relative: to the bundle) as config.json",
    ),
    Opt(
        "pid-file", value=True, metavar="FILE", help="write the container's pid (the anchor's) here"
    ),
    Opt("console-socket", value=True, metavar="SOCKET", help="receives the pty master"),
    Opt("no-pivot", ignored=True),
    Opt("no-new-keyring", ignored=True),
    # srun carries only the container's stdin, stdout and stderr to the nodes
    Opt("preserve-fds", value=True, metavar="N", ignored=True),
)
USAGE = usage_text(
    "scrun create [OPTIONS] CONTAINER-ID",
    "Create a container from an OCI bundle: allocate its Slurm job, stage it with the\n"
    "site's scrun.lua, and wait for `scrun start`. Exits non-zero, leaving nothing behind,\n"
    "when the bundle is invalid, the allocation is refused or stage-in fails.",
    OPTIONS,
)


def create_container(
    ctx: CommandContext,
    container_id: str,
    values: dict[str, Any],
    *,
    foreground: bool = False,
    own_pid_namespace: bool = False,
) -> Child:
    """Everything `create` does, with the OPTIONS values `create` and `run` share; returns
    the anchor (our child) once the container is created. No --bundle means the current directory
    (scrun.lua is told it was not given). `foreground`: `scrun run` waits for the container,
    so with a terminal and no console socket the caller's terminal (stdin) becomes the
    container's, as crun does. `own_pid_namespace`: the anchor is forked into a pid
    namespace of its own (scrunlib.pidns: what `podman top` shows); after that this
    process cannot fork again, so only `create`, which exits next, asks for it."""
    started = time.monotonic()
    bundle_path: str | None = values.get("bundle")
    pid_file: str | None = values.get("pid-file")
    console_socket: str | None = values.get("console-socket")
    spool = ctx.spool(container_id)
    if pid_file:
        _check_pid_file_dir(pid_file)
    bundle = bundles.load(bundle_path or os.getcwd(), values.get("config"))
    if bundle.terminal and not console_socket:
        if not foreground:
            raise InvalidInput(
                "process.terminal is true: give --console-socket to receive the container's pty"
            )
        if not os.isatty(0):
            raise InvalidInput(
                "process.terminal is true but stdin is not a terminal and no --console-socket "
                "was given"
            )
    # refused before anything is made; a request becomes the config that runs
    engine_config = engine_gpus.engine_request(bundle, os.environ)
    sized = engine_resources.engine_request(engine_config or bundle.config, os.environ)
    engine_config = sized or engine_config
    spool.create()
    read_end, write_end = os.pipe()  # the anchor's report
    try:
        if engine_config is not None:
            bundle = bundles.with_config(bundle, engine_config, spool.config_file)
        state = ContainerState(
            id=container_id,
            bundle=bundle.path,
            rootfs=bundle.rootfs,
            oci_version=bundle.oci_version,
            annotations=bundle.annotations,
            owner=user_name(real_ids()[0]) or str(real_ids()[0]),
        )
        state.save(spool)
        return _launch_anchor(
            read_end,
            own_pid_namespace,
            not foreground,
            Launch(
                spool=spool,
                bundle=bundle,
                state=state,
                site=ctx.site,
                log=anchor_logging(ctx.log_settings, spool.log_file),
                log_file=ctx.log_settings.log_file,
                started=started,
                ready_fd=write_end,
                bundle_given=bundle_path is not None,
                pid_file=os.path.abspath(pid_file) if pid_file else None,
                console_socket=os.path.abspath(console_socket) if console_socket else None,
                slurm_conf_option=ctx.slurm_conf_option,
            ),
        )
    except BaseException:
        spool.remove()
        raise


def _check_pid_file_dir(pid_file: str) -> None:
    """The anchor writes --pid-file once the job is granted and staged: a directory that
    is not there is refused first, before there is any job to end."""
    directory = os.path.dirname(os.path.abspath(pid_file))
    if not os.path.isdir(directory):
        raise InvalidInput(f"--pid-file {pid_file}: its directory {directory} does not exist")


def _launch_anchor(
    read_end: int, own_pid_namespace: bool, own_process_group: bool, launch: Launch
) -> Child:
    """Fork the anchor, hand it `launch` and wait for its report on `read_end`: its Child
    once it says the container is created, else the error it reports (or its exit
    status). `own_process_group`: the anchor leads a process group of its own, as crun's
    container process does: conmon's `--timeout` (`podman run --timeout`) SIGKILLs the
    group of the pid in --pid-file, which would otherwise be conmon's own, and conmon with
    it, leaving podman no exit status and the job held. Not under `scrun run` in the
    foreground, whose process group must stay the terminal's."""

    def anchor() -> int:  # keeps our stdio, which is the container's
        os.close(read_end)
        if own_process_group:
            os.setpgid(0, 0)
        from scrun_anchor.main import run

        run(launch)

    child = fork(anchor, own_pid_namespace=own_pid_namespace)
    if launch.ready_fd is not None:
        os.close(launch.ready_fd)  # the anchor's end: EOF once it has reported or died
    report = read_report(read_end)
    if report.created:
        return child
    code = child.wait_ended()
    if report.error:
        raise ScrunError(report.error)
    raise ScrunError(f"the container's anchor failed before reporting (status {code})")


def run(ctx: CommandContext, argv: Sequence[str]) -> int:
    values, words = parse(argv, OPTIONS, USAGE, what="create")
    (container_id,) = one_id(words, "create")
    create_container(ctx, container_id, values, own_pid_namespace=True)
    return 0
