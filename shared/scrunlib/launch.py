"""How `scrun create` starts the container's anchor and hears back from it: both sides of
that contract live here.

`scrun create` forks and runs the anchor in the child (scrun_anchor.main.run: no new
program, so no second interpreter start), handing it a Launch: the objects create has
already made (the loaded bundle, the state.json record it saved, the site configuration,
the anchor's log settings) and what it was asked for. The `scrun-anchor` command builds
the same Launch from its command line (scrun_anchor.main.main; OPTIONS):

    scrun-anchor --root DIR --bundle DIR --ready-fd N LOG-OPTIONS [--bundle-is-cwd]
                 [--config FILE] [--pid-file FILE] [--console-socket SOCKET]
                 [--slurm-conf FILE] -- ID

(LOG-OPTIONS: --stderr-level, --syslog-level, --file-level, --log-format and --log, the
caller's logging, from which anchor_logging makes the anchor's). create reads the ready fd until
EOF. The anchor writes exactly one line there: `created <pid>` once the container is
created, or `error <message>` after it has undone everything. No line at all means the
anchor died before it could report. A create that is killed before the report (the
engine then has no container to end) makes the anchor undo everything, the spool too.
"""

from __future__ import annotations

import os

from scrunlib.log import INFO, LogSettings
from scrunlib.options import Opt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from scrunlib.bundle import Bundle
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState

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
    """What the anchor is handed: by `scrun create` as the objects it made, or built from
    scrun-anchor's options. (A plain class: this is on create's path, which does without
    dataclasses: lint_tree/hotpath.py.)"""

    __slots__ = (
        "bundle",
        "bundle_given",
        "console_socket",
        "log",
        "log_file",
        "pid_file",
        "ready_fd",
        "site",
        "slurm_conf_option",
        "spool",
        "started",
        "state",
    )

    def __init__(
        self,
        *,
        spool: Spool,
        bundle: Bundle,
        state: ContainerState,
        site: SiteConfig,
        log: LogSettings,
        log_file: str | None,
        started: float,
        ready_fd: int | None = None,
        bundle_given: bool = True,
        pid_file: str | None = None,
        console_socket: str | None = None,
        slurm_conf_option: str | None = None,
    ) -> None:
        self.spool, self.bundle, self.state, self.site = spool, bundle, state, site
        self.log = log  # the anchor's own settings (anchor_logging)
        self.log_file = log_file  # the caller's --log file: the anchor's once created
        self.started = started  # time.monotonic() when create began parsing the bundle
        self.ready_fd = ready_fd  # None: nobody waits for the report
        # False when create defaulted to its cwd: scripts are told so (orig_bundle nil)
        self.bundle_given = bundle_given
        self.pid_file, self.console_socket = pid_file, console_socket
        self.slurm_conf_option = slurm_conf_option  # scrun -f


def anchor_logging(caller: LogSettings, anchor_log: str) -> LogSettings:
    """The anchor's log settings, from its caller's: fd 2 belongs to the container, so no
    stderr; the anchor's own log (`anchor_log`, in the spool) at least at info; syslog as
    the caller has it. The caller's --log file is not one of them: the anchor turns it on
    once `created` (log.open_log_file; until then create reports, and podman wants one
    line)."""
    return LogSettings(
        stderr=0,
        syslog=caller.syslog,
        file=caller.file,
        log_format=caller.log_format,
        extra_file=anchor_log,
        extra_level=max(INFO, caller.stderr, caller.file),
        program="scrun-anchor",
    )


class ReadyPipe:
    """The anchor's side: its one report to the waiting `scrun create`, and whether that
    create is still there to hear it. A create killed before the report leaves the engine
    no container (conmon and containerd's shim take its death as create's failure): the
    anchor must then undo what it made, the spool included, which create would remove."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd  # None: nobody waits for the report (or it has been sent)
        self.create_gone = False

    def created(self, pid: int) -> None:
        self._send(f"{CREATED} {pid}")

    def error(self, message: str) -> None:
        self._send(f"{ERROR} {message}")

    def wait(self, fd: int | None, timeout: float) -> bool:
        """Whether `fd` becomes readable within `timeout` seconds (None: nothing to wait
        for, create alone is looked at). Wakes early when the waiting create goes, which
        `create_gone` then says: its end of the pipe closed shows as POLLERR on ours,
        reported unasked."""
        import select  # built into the interpreter's library: next to nothing

        poller = select.poll()
        if fd is not None:
            poller.register(fd, select.POLLIN)
        if self.fd is not None and not self.create_gone:
            poller.register(self.fd, 0)
        readable = False
        for polled, events in poller.poll(max(timeout, 0) * 1000 if fd is not None else 0):
            if polled == fd:
                readable = True
            elif events & select.POLLERR:
                self.create_gone = True
        return readable

    def check_create(self) -> bool:
        """Whether the waiting create has gone, without waiting."""
        self.wait(None, 0)
        return self.create_gone

    def _send(self, line: str) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        # An invalid fd (never valid, or closed) must not keep the anchor from going on to
        # end its job; a create that has gone is remembered (create_gone).
        try:
            os.write(fd, line.encode(errors="backslashreplace") + b"\n")
        except BrokenPipeError:
            self.create_gone = True
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
