"""Where scrun finds Slurm without help from the environment.

Podman runs the runtime with an almost empty environment (no SLURM_CONF, and no PATH for
the cleanup `delete`), so a fixed, documented site configuration file says where slurm.conf
and Slurm's commands are. Precedence for slurm.conf: `-f`, then `SLURM_CONF`, then the site
file's `slurm_conf`, then /etc/slurm/slurm.conf. Slurm commands: the site file's `bin_dir`,
then the usual system locations.

The site file is TOML, looked up in this order (first that exists wins):
  1. `$SCRUN_SITE_CONFIG` (when set: a test or a wrapper can point elsewhere)
  2. `<installation prefix>/etc/scrun/scrun.toml` (`sys.prefix`; a venv's own etc/)
  3. `/etc/scrun/scrun.toml`

Keys (all optional):
  slurm_conf = "/etc/slurm/slurm.conf"
  bin_dir    = "/usr/bin"                 # where srun, salloc, scancel, squeue, scontrol are
  lua_timeout = 300                       # seconds a scrun.lua hook may run
  step_grace = 10                         # seconds between SIGTERM and SIGKILL for a stuck srun
  delete_timeout = 5                      # seconds delete and kill wait for an anchor that
                                          # cannot act (frozen, stopped, in D state) before
                                          # they end or signal its job themselves
  exec_command = "crun ... exec %o %n.%u.%j.%s.%t"   # how `scrun exec` enters a container on
                                          # its node (scrunlib.exec_process; default: from
                                          # oci.conf's RunTimeQuery)
  create_wait = 30                        # seconds create waits for a granted job's stage-in
                                          # before it returns and stage-in goes on (a job
                                          # Slurm queues returns at once)
  pending_notice = 5                      # seconds a started container's job waits in the
                                          # queue before its stderr says why; 0: never
  queue_poll = 30                         # seconds between reads of a queued job's reason
  slurmctld_wait = 600                    # seconds a container's end waits for slurmctld to
                                          # answer, or to stop listing its ended steps (a
                                          # restart, a failover), before stage-out is left
                                          # to `scrun delete`
"""

from __future__ import annotations

import os
import sys

from scrunlib import filecache, leanjson
from scrunlib.errors import InvalidInput, reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
DEFAULT_LUA_TIMEOUT = 300.0
DEFAULT_STEP_GRACE = 10.0
DEFAULT_DELETE_TIMEOUT = 5.0
DEFAULT_CREATE_WAIT = 30.0
DEFAULT_PENDING_NOTICE = 5.0
DEFAULT_QUEUE_POLL = 30.0
DEFAULT_SLURMCTLD_WAIT = 600.0
# The fewest seconds between two reads of a queued job's state: slurmctld's scheduler does
# not move a queue faster, and 1000 queued containers must not keep it busy.
MIN_QUEUE_POLL = 5.0
SYSTEM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/sbin")


def site_config_candidates(environ: Mapping[str, str]) -> list[str]:
    explicit = environ.get("SCRUN_SITE_CONFIG")
    if explicit:
        return [explicit]
    return [os.path.join(sys.prefix, "etc", "scrun", "scrun.toml"), "/etc/scrun/scrun.toml"]


class SiteConfig:
    """The parsed site file (or defaults when there is none). A plain class: every
    container's anchor builds one, and its path does without dataclasses
    (lint_tree/hotpath.py)."""

    __slots__ = (
        "bin_dir",
        "create_wait",
        "delete_timeout",
        "exec_command",
        "lua_timeout",
        "path",
        "pending_notice",
        "queue_poll",
        "slurm_conf",
        "slurmctld_wait",
        "step_grace",
    )

    def __init__(
        self,
        path: str | None = None,
        slurm_conf: str | None = None,
        bin_dir: str | None = None,
        lua_timeout: float = DEFAULT_LUA_TIMEOUT,
        step_grace: float = DEFAULT_STEP_GRACE,
        exec_command: str | None = None,
        delete_timeout: float = DEFAULT_DELETE_TIMEOUT,
        create_wait: float = DEFAULT_CREATE_WAIT,
        pending_notice: float = DEFAULT_PENDING_NOTICE,
        queue_poll: float = DEFAULT_QUEUE_POLL,
        slurmctld_wait: float = DEFAULT_SLURMCTLD_WAIT,
    ) -> None:
        self.path, self.slurm_conf, self.bin_dir = path, slurm_conf, bin_dir
        self.lua_timeout, self.step_grace = lua_timeout, step_grace
        self.exec_command = exec_command
        self.delete_timeout = delete_timeout
        self.create_wait = create_wait
        self.pending_notice = pending_notice  # 0: no notices
        self.queue_poll = max(queue_poll, MIN_QUEUE_POLL)
        self.slurmctld_wait = slurmctld_wait

    def slurm_conf_path(self, option: str | None, environ: Mapping[str, str]) -> str:
        """slurm.conf in use: `-f`, then SLURM_CONF, then the site file, then the default."""
        return option or environ.get("SLURM_CONF") or self.slurm_conf or DEFAULT_SLURM_CONF

    def command(self, name: str) -> str:
        """Absolute path of a Slurm command (never relies on PATH, which may be missing)."""
        dirs = ([self.bin_dir] if self.bin_dir else []) + list(SYSTEM_BIN_DIRS)
        for directory in dirs:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
        where = ", ".join(dirs)
        raise InvalidInput(
            f"Slurm command {name!r} not found in {where} (set bin_dir in the site config)"
        )


def load(environ: Mapping[str, str] = os.environ, cache: str | None = None) -> SiteConfig:
    """Read the first site file that exists; a malformed one is an error naming the file.
    `cache` (a file, see scrunlib.filecache) keeps the parsed file as JSON until the file
    changes: each container's anchor then reads it without importing tomllib and typing."""
    for path in site_config_candidates(environ):
        if os.path.isfile(path):
            return _load_file(path, cache)
        if os.path.exists(path):  # a directory or a device: not a site file left out
            raise InvalidInput(f"site config {path} is not a regular file")
    return SiteConfig()


def _load_file(path: str, cache: str | None) -> SiteConfig:
    try:
        key = f"site-config {filecache.identity(path)}"
    except OSError as exc:
        raise InvalidInput(f"cannot read site config {path}: {reason(exc)}") from exc
    cached = filecache.read(cache, key)
    if cached is not None:
        try:
            return _from_mapping(path, leanjson.loads(cached))
        except ValueError:
            pass  # a damaged cache is parsed afresh
    import tomllib

    try:
        with open(path, "rb") as stream:
            data = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"cannot read site config {path}: {exc}") from exc
    config = _from_mapping(path, data)  # only a valid file (strings and numbers) is cached
    filecache.write(cache, key, leanjson.dumps(data))
    return config


def seconds(text: str) -> float:
    """A time limit given on a command line (`scrun-stage --timeout`), in seconds: above 0
    and below 1e6, as the site file's. ValueError otherwise (argparse then names the
    option and the value)."""
    value = float(text)
    if not 0 < value < 1e6:  # also refuses nan
        raise ValueError(text)
    return value


def _from_mapping(path: str, data: Mapping[str, Any]) -> SiteConfig:
    known: dict[str, type | tuple[type, ...]] = {
        "slurm_conf": str,
        "bin_dir": str,
        "lua_timeout": (int, float),
        "step_grace": (int, float),
        "exec_command": str,
        "delete_timeout": (int, float),
        "create_wait": (int, float),
        "pending_notice": (int, float),
        "queue_poll": (int, float),
        "slurmctld_wait": (int, float),
    }
    for key, value in data.items():
        expected = known.get(key)
        if expected is None:
            raise InvalidInput(f"site config {path}: unknown key {key!r}")
        if not isinstance(value, expected) or isinstance(value, bool):
            raise InvalidInput(f"site config {path}: {key} has the wrong type")
        if not isinstance(value, (int, float)):
            continue
        lowest_ok = value >= 0 if key == "pending_notice" else value > 0  # 0: no notices
        if not (lowest_ok and value < 1e6):
            raise InvalidInput(f"site config {path}: {key} must be between 0 and 1e6 seconds")
    return SiteConfig(
        path=path,
        slurm_conf=data.get("slurm_conf"),
        bin_dir=data.get("bin_dir"),
        lua_timeout=float(data.get("lua_timeout", DEFAULT_LUA_TIMEOUT)),
        step_grace=float(data.get("step_grace", DEFAULT_STEP_GRACE)),
        exec_command=data.get("exec_command"),
        delete_timeout=float(data.get("delete_timeout", DEFAULT_DELETE_TIMEOUT)),
        create_wait=float(data.get("create_wait", DEFAULT_CREATE_WAIT)),
        pending_notice=float(data.get("pending_notice", DEFAULT_PENDING_NOTICE)),
        queue_poll=float(data.get("queue_poll", DEFAULT_QUEUE_POLL)),
        slurmctld_wait=float(data.get("slurmctld_wait", DEFAULT_SLURMCTLD_WAIT)),
    )
