"""The two unprivileged test users (harness/test-users.sh) and how tests act as them.

Imported as `users` by the rootless and isolation tests (pytest puts this folder on
sys.path). Every command runs through `su - USER -c SCRIPT`, as a person logging in would:
a login environment without XDG_RUNTIME_DIR (there is no logind), the user's own
~/.config/containers (which registers this checkout's scrun) and their own image store.
"""

from __future__ import annotations

import pwd
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers import SCRUN_PODMAN, cmdline, is_this_checkouts_anchor, run, wait_for_clean
from plumbum import local

if TYPE_CHECKING:
    from conftest import SiteRuntime

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/busybox"
# Rootless podman on a host whose / is not a shared mount warns on every command.
PODMAN_NOISE = '"/" is not a shared mount'


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path
    slurm_conf: str

    @classmethod
    def named(cls, name: str, slurm_conf: str) -> User:
        entry = pwd.getpwnam(name)
        return cls(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), slurm_conf)

    @property
    def root(self) -> Path:
        """scrun's default runtime root under this user's rootless podman."""
        return Path(f"/run/user/{self.uid}/scrun")

    def sh(
        self,
        script: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 180.0,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        """`script` in the user's login shell, with SLURM_CONF and `env` exported
        (helpers.run's keyword arguments: input=, stdin=, ...)."""
        exports = {"SLURM_CONF": self.slurm_conf, **(env or {})}
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in exports.items())
        return run(local["su"]["-", self.name, "-c", prefix + script], timeout=timeout, **kwargs)

    def podman(
        self, *args: str, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """`podman --runtime scrun ARGS` as the user (rootless)."""
        return self.sh(shlex.join([*SCRUN_PODMAN, *args]), env=env, **kwargs)

    def jobs(self) -> dict[str, str]:
        """This user's jobs that scrun made: job id → `user partition name`."""
        done = self.sh("squeue -h -u $(id -u) -o '%i %u %P %j %k'", timeout=30)
        assert done.returncode == 0, done.stderr
        return {
            line.split()[0]: " ".join(line.split()[1:4])
            for line in done.stdout.splitlines()
            if " scrun:" in line
        }


def errors(text: str) -> list[str]:
    """stderr without rootless podman's mount-propagation warning."""
    return [line for line in text.splitlines() if line.strip() and PODMAN_NOISE not in line]


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line scrun told the user, for a container that failed."""
    assert done.returncode != 0, done
    lines = errors(done.stderr)
    assert len(lines) == 1, done.stderr
    return lines[0]


def anchors_of(uid: int) -> list[str]:
    """`pid: command line` of this user's anchors (of this checkout's scrun)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue  # not a process, or gone meanwhile
        real_uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        argv = cmdline(proc.name) if int(real_uid) == uid else None
        if argv and is_this_checkouts_anchor(argv):
            found.append(f"{proc.name}: {' '.join(argv)}")
    return found


def user_leftovers(*people: User) -> list[str]:
    """What scrun should have cleaned up for these users: jobs it made, anchors, container
    directories in their default roots."""
    problems = []
    for person in people:
        problems += [f"job of {person.name}: {job}" for job in person.jobs()]
        problems += [f"anchor of {person.name}: {line}" for line in anchors_of(person.uid)]
        if person.root.is_dir():
            problems += [
                f"spool dir left: {d}" for d in sorted(person.root.iterdir()) if d.is_dir()
            ]
    return problems


def assert_users_clean(*people: User, timeout: float = 15.0) -> None:
    wait_for_clean(lambda: user_leftovers(*people), timeout)


def pick_users(exports: Mapping[str, str], slurm_conf: str) -> tuple[User, User]:
    names = (exports.get("SCRUN_TEST_USER"), exports.get("SCRUN_TEST_USER2"))
    if not all(names):
        pytest.fail("make env names no SCRUN_TEST_USER/SCRUN_TEST_USER2 (harness/test-users.sh)")
    first, second = (User.named(str(name), slurm_conf) for name in names)
    return first, second


def let_users_reach(path: Path) -> None:
    """Let other users traverse (not list) every parent of `path`: pytest's temporary
    directories are 0700, and the users' podman must read a test's site files there."""
    for parent in path.parents:
        if parent == Path("/"):
            break
        mode = parent.stat().st_mode
        if mode & 0o001 == 0:
            parent.chmod(mode | 0o001)


def user_site(person: User, site: SiteRuntime) -> dict[str, str]:
    """The user's own containers.conf, with the site runtime's scrun (its scrun.lua); and
    SLURM_CONF naming the site's slurm.conf, as podman 5 passes the user's on to scrun."""
    let_users_reach(site.dir)
    own = (person.home / ".config/containers/containers.conf").read_text()
    conf = site.dir / f"containers-{person.name}.conf"
    runtimes = f'[engine.runtimes]\nscrun = ["{site.dir / "scrun"}"]\n'
    conf.write_text(own[: own.index("[engine.runtimes]")] + runtimes)
    conf.chmod(0o644)
    return {"CONTAINERS_CONF": str(conf), "SLURM_CONF": site.slurm_conf}
