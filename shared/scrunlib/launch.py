"""How `scrun create` starts the container's anchor and hears back from it: both sides of
that contract live here.

`scrun create` forks and runs the anchor's main with these options in the child (no new
program, so no second interpreter start), the same ones the `scrun-anchor` command takes:

    scrun-anchor --root DIR --bundle DIR --ready-fd N LOG-OPTIONS [--bundle-is-cwd]
                 [--config FILE] [--pid-file FILE] [--console-socket SOCKET]
                 [--slurm-conf FILE] -- ID

(LOG-OPTIONS: LogSettings.as_args, so the anchor logs exactly like its parent) and reads the
ready fd until EOF. The anchor writes exactly one line there: `created <pid>` once the
container is created, or `error <message>` after it has undone everything. No line at all
means the anchor died before it could report.
"""

from __future__ import annotations

import os

from scrunlib.options import Opt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

OPTIONS = (
    Opt("root", value=True, help="the runtime root holding the spool directory"),
    Opt("bundle", value=True, help="the bundle create was given"),
    Opt("bundle-is-cwd", help="create was given no --bundle (its cwd is used)"),
    Opt("config", value=True, help="crun's --config: this file instead of config.json"),
    Opt("ready-fd", value=True, help="report `created <pid>` or `error <msg>` here"),
    Opt("pid-file", value=True, help="write our pid here once created"),
    Opt("console-socket", value=True, help="send the pty master here"),
    Opt("slurm-conf", value=True, help="slurm.conf (scrun -f)"),
    Opt("stderr-level", value=True, help="scrun's stderr level (for anchor.log)"),
    Opt("syslog-level", value=True, help="syslog level"),
    Opt("file-level", value=True, help="--log file level"),
    Opt("log", value=True, help="the caller's --log file (used once created)"),
    Opt("log-format", value=True, help="json or text"),
    Opt("version", help="print the version and exit"),
)

CREATED = "created"
ERROR = "error"


class Launch:
    """What `scrun create` tells the anchor on its command line. (A plain class: this is
    on create's path, which does without dataclasses: lint_tree/hotpath.py.)"""

    __slots__ = (
        "bundle",
        "bundle_is_cwd",
        "config_file",
        "console_socket",
        "container_id",
        "log_args",
        "pid_file",
        "ready_fd",
        "root",
        "slurm_conf",
    )

    def __init__(
        self,
        root: str,
        bundle: str,
        container_id: str,
        ready_fd: int,
        log_args: Sequence[str],  # LogSettings.as_args()
        bundle_is_cwd: bool = False,
        config_file: str | None = None,  # absolute; None: the bundle's config.json
        pid_file: str | None = None,
        console_socket: str | None = None,
        slurm_conf: str | None = None,
    ) -> None:
        self.root, self.bundle, self.container_id = root, bundle, container_id
        self.ready_fd, self.log_args, self.bundle_is_cwd = ready_fd, log_args, bundle_is_cwd
        self.pid_file, self.console_socket = pid_file, console_socket
        self.slurm_conf, self.config_file = slurm_conf, config_file

    def argv(self) -> list[str]:
        """The anchor's command line after its program name: what OPTIONS parses."""
        argv = [
            "--root",
            self.root,
            "--bundle",
            self.bundle,
            "--ready-fd",
            str(self.ready_fd),
            *self.log_args,
        ]
        if self.bundle_is_cwd:
            argv.append("--bundle-is-cwd")
        if self.config_file:
            argv += ["--config", self.config_file]
        if self.pid_file:
            argv += ["--pid-file", self.pid_file]
        if self.console_socket:
            argv += ["--console-socket", self.console_socket]
        if self.slurm_conf:
            argv += ["--slurm-conf", self.slurm_conf]
        return [*argv, "--", self.container_id]


class ReadyPipe:
    """The anchor's side: its one report to the waiting `scrun create`."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def created(self, pid: int) -> None:
        self._send(f"{CREATED} {pid}")

    def error(self, message: str) -> None:
        self._send(f"{ERROR} {message}")

    def _send(self, line: str) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        # create may have gone away, or the fd never was valid: nothing to tell then, and
        # an invalid fd must not keep the anchor from going on to end its job.
        try:  # noqa: SIM105
            os.write(fd, line.encode(errors="backslashreplace") + b"\n")
        except OSError:
            pass
        try:  # noqa: SIM105
            os.close(fd)
        except OSError:
            pass


class Report:
    """`scrun create`'s side: what the anchor said. `created` False with an empty `error`:
    the anchor said nothing (it died)."""

    __slots__ = ("created", "error")

    def __init__(self, created: bool, error: str = "") -> None:
        self.created, self.error = created, error


def read_report(fd: int) -> Report:
    """Read the ready pipe to EOF (the anchor closes it once it has reported or died)."""
    with os.fdopen(fd, "rb") as pipe:
        line = pipe.read().decode(errors="replace").strip()
    verdict, _, detail = line.partition(" ")
    if verdict == CREATED:
        return Report(created=True)
    return Report(created=False, error=detail if verdict == ERROR else "")
