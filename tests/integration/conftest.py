"""Fixtures for tests that need the real thing: the private Slurm cluster and podman.

Every test under tests/integration is marked `integration` automatically.

* `cluster` (session): runs harness/cluster-up.sh once (idempotent, well under a second
  when the cluster is already up) and returns a `Cluster`. If the cluster cannot start,
  the test FAILS: a missing cluster must never look like a green run.
* `podman` (session): `podman(*args, **run_kwargs) -> CompletedProcess[str]`, podman with
  the private CONTAINERS_CONF (text mode, output captured, never raises on exit codes);
  `podman.scrun(*args, ...)` is `podman --runtime scrun ARGS`.
* `docker` (session): a `Docker`: a PRIVATE containerd + dockerd (harness/docker-up.sh,
  everything under DIR/docker) with the runtime name `scrun` and the image
  localhost/busybox. Called like `podman`: `docker(*args, **run_kwargs)` runs the docker.io
  client against that daemon. Started once, on first use; stopped again at the end of the
  session (harness/docker-down.sh) unless SCRUN_KEEP_DOCKER=1. If it cannot start, the tests
  using it FAIL.
* `no_leftovers` (function): after the test, `assert_no_leftovers(cluster.env)`. It yields
  the check itself, so a test can also call `no_leftovers()` half way.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    cmdline,
    from_other_checkout,
    is_this_checkouts_anchor,
    job_records,
    program,
    run,
    scrun_podman,
    wait_for_clean,
)
from plumbum import local
from plumbum.commands.base import BaseCommand
from scrunlib.slurm_commands import tagged_container

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "harness"
INTEGRATION_DIR = Path(__file__).resolve().parent
# cluster-up installs nothing during a test run (make test / make deps did that), so a
# missing package is a quick, clear failure instead of minutes of apt-get.
CLUSTER_UP_TIMEOUT = 300.0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the marker must be on the items before `-m` deselects anything.
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@dataclass(frozen=True)
class Cluster:
    """The running test cluster: paths, and the environment to run anything against it."""

    dir: Path
    slurm_conf: str
    containers_conf: str
    bundle: str  # absolute path of the ready-made busybox OCI bundle
    munge_socket: str
    test_user: str | None
    exports: dict[str, str]  # exactly what `make env` exports
    env: dict[str, str] = field(repr=False)  # os.environ + exports: pass as env= to subprocess

    def __getitem__(self, name: str) -> str:
        """`cluster["SLURM_CONF"]`: an exported variable."""
        return self.exports[name]

    def run(
        self, argv: list[str], timeout: float = 120.0, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run a command against the cluster (helpers.run: text, output captured, no check),
        in `/`: srun's steps start in its cwd, and the nodes do not have this clone's (one
        under /tmp is the login host's own)."""
        kwargs.setdefault("cwd", "/")
        return run(program(argv[0], self.env)[argv[1:]], timeout=timeout, env=self.env, **kwargs)

    def job_records(self, *job: str) -> list[dict[str, str]]:
        """`scontrol -o show job [JOB]`: every job slurmctld knows (running, or ended within
        MinJobAge), or that one, parsed."""
        done = self.run(["scontrol", "-o", "show", "job", *job], timeout=30)
        assert done.returncode == 0 or "No jobs" in done.stdout + done.stderr, done.stderr
        return job_records(done.stdout)


def parse_exports(text: str) -> dict[str, str]:
    """`export NAME=value` lines (shell-quoted, as harness/env.sh prints them) → dict."""
    exports: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, _, value = words[1].partition("=")
            exports[name] = value
    return exports


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    skip_apt = {} if "SKIP_APT" in os.environ else {"SKIP_APT": "1"}
    done = run(local[str(HARNESS / "cluster-up.sh")], timeout=CLUSTER_UP_TIMEOUT, env=skip_apt)
    exports = parse_exports(done.stdout)
    if done.returncode != 0 or "SLURM_CONF" not in exports:
        tail = "\n".join(done.stderr.splitlines()[-30:])
        pytest.fail(
            f"harness/cluster-up.sh failed (exit {done.returncode}); "
            f"`make deps cluster-up` shows why:\n{tail}",
            pytrace=False,
        )
    return Cluster(
        dir=Path(exports["SCRUN_CLUSTER_DIR"]),
        slurm_conf=exports["SLURM_CONF"],
        containers_conf=exports["CONTAINERS_CONF"],
        bundle=exports["SCRUN_TEST_BUNDLE"],
        munge_socket=exports["MUNGE_SOCKET"],
        test_user=exports.get("SCRUN_TEST_USER"),
        exports=exports,
        env={**os.environ, **exports},
    )


@dataclass(frozen=True)
class Podman:
    """podman with the cluster's private CONTAINERS_CONF. Keyword arguments go to
    helpers.run (input=, timeout= (default 120 s), env=...)."""

    env: dict[str, str] = field(repr=False)

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`podman("--runtime", "crun", "run", "--rm", "localhost/busybox", "echo", "hi")`."""
        return self._run(local["podman"][args], kwargs)

    def scrun(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`podman --runtime scrun ARGS`."""
        return self._run(scrun_podman(*args), kwargs)

    def _run(
        self, command: BaseCommand, kwargs: dict[str, Any]
    ) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("timeout", 120.0)
        kwargs.setdefault("env", self.env)
        return run(command, **kwargs)


@pytest.fixture(scope="session")
def podman(cluster: Cluster) -> Podman:
    return Podman(cluster.env)


# ----------------------------------------------------------------------------- docker

# The docker.io package's client: it matches the daemon (another `docker` may come first
# on PATH, e.g. a newer one in /usr/local/bin).
DOCKER_CLI = "/usr/bin/docker"
DOCKER_UP_TIMEOUT = 120.0
DOCKER_DOWN_TIMEOUT = 90.0  # dockerd gets 30 s to stop its containers, then KILL


@dataclass(frozen=True)
class Docker:
    """The private dockerd of harness/docker-up.sh; call it like the `podman` fixture."""

    host: str  # unix://DIR/docker/docker.sock
    runtime_root: Path  # what dockerd passes to scrun as --root: scrun's state for docker
    env: dict[str, str] = field(repr=False)  # cluster env + DOCKER_HOST, private DOCKER_CONFIG

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """`docker("run", "--rm", "--runtime", "scrun", ...)`. Keyword arguments go to
        helpers.run (input=, timeout= (default 120 s), env=...); text mode, output
        captured, never raises on exit codes."""
        kwargs.setdefault("timeout", 120.0)
        kwargs.setdefault("env", self.env)
        return run(self.command(*args), **kwargs)

    def command(self, *args: str) -> BaseCommand:
        """`docker ARGS` against this daemon, as a command (to start in the background)."""
        return local[DOCKER_CLI]["--host", self.host, args]


def _docker_script(name: str, cluster: Cluster, timeout: float) -> subprocess.CompletedProcess[str]:
    return run(local[str(HARNESS / name)][str(cluster.dir)], timeout=timeout, env=cluster.env)


def _stop_docker(cluster: Cluster) -> str | None:
    """harness/docker-down.sh; None when it worked, else what went wrong."""
    done = _docker_script("docker-down.sh", cluster, DOCKER_DOWN_TIMEOUT)
    if done.returncode != 0:
        return f"harness/docker-down.sh failed (exit {done.returncode}):\n{done.stderr}"
    return None


@pytest.fixture(scope="session")
def docker(cluster: Cluster) -> Iterator[Docker]:
    # On failure, whatever did start is stopped again: CI leaves nothing behind.
    try:
        done = _docker_script("docker-up.sh", cluster, DOCKER_UP_TIMEOUT)
    except pytest.fail.Exception:  # it did not finish
        _stop_docker(cluster)
        raise
    exports = parse_exports(done.stdout)
    if done.returncode != 0 or "DOCKER_HOST" not in exports:
        _stop_docker(cluster)
        tail = "\n".join(done.stderr.splitlines()[-30:])
        pytest.fail(f"harness/docker-up.sh failed (exit {done.returncode}):\n{tail}", pytrace=False)
    docker_dir = cluster.dir / "docker"
    client_config = docker_dir / "client"  # not the user's ~/.docker (proxies, contexts)
    client_config.mkdir(exist_ok=True)
    yield Docker(
        host=exports["DOCKER_HOST"],
        runtime_root=docker_dir / "exec" / "runtime-runc" / "moby",
        env={
            **cluster.env,
            "DOCKER_HOST": exports["DOCKER_HOST"],
            "DOCKER_CONFIG": str(client_config),
        },
    )
    if os.environ.get("SCRUN_KEEP_DOCKER") != "1":
        problem = _stop_docker(cluster)
        if problem:
            pytest.fail(problem, pytrace=False)


# ----------------------------------------------------------------------------- leftovers


def spool_roots(env: Mapping[str, str]) -> list[Path]:
    """Where scrun keeps per-container state when podman gives no --root:
    `$XDG_RUNTIME_DIR/scrun` when set and non-empty, and `/run/user/<uid>/scrun`
    (what podman's empty XDG_RUNTIME_DIR leads to)."""
    roots = [Path(f"/run/user/{os.getuid()}/scrun")]
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg:
        roots.insert(0, Path(xdg) / "scrun")
    return list(dict.fromkeys(roots))


def anchor_processes() -> list[str]:
    """`pid: command line` of every scrun-anchor process of this checkout in this mount
    namespace (the machine's; inside the Debian 13 root, the root's)."""
    found = []
    own_namespace = os.readlink("/proc/self/ns/mnt")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if os.readlink(proc / "ns" / "mnt") != own_namespace:
                continue
        except OSError:
            continue  # gone meanwhile
        argv = cmdline(proc.name)
        if argv and is_this_checkouts_anchor(argv):
            found.append(f"{proc.name}: {' '.join(argv)}")
    return found


def _spool_dir_of_other_checkout(container_dir: Path) -> bool:
    """The container's anchor still runs, started from another checkout (as scrun-anchor,
    or as a fork of that checkout's `scrun create`)."""
    try:
        pid = json.loads((container_dir / "state.json").read_text())["anchor_pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    argv = cmdline(pid) if isinstance(pid, int) else None
    return argv is not None and from_other_checkout(argv)


def leftovers(env: Mapping[str, str]) -> list[str]:
    """Everything scrun should have cleaned up but did not (empty list: clean)."""
    problems = []
    # Every job scrun allocates carries its job tag as comment (scrunlib.slurm_commands.job_tag),
    # whatever its name (SCRUN_JOB_NAME); a job a test made itself does not.
    squeue = list_jobs(env)
    if squeue.returncode != 0:
        problems.append(f"squeue failed: {squeue.stderr.strip()}")
    problems += [f"job still in squeue: {line}" for line in scrun_jobs(squeue.stdout)]
    problems += [f"scrun-anchor still running: {p}" for p in anchor_processes()]
    for root in spool_roots(env):
        if root.is_dir():
            problems += [
                f"spool dir left: {d}"
                for d in sorted(root.iterdir())
                if d.is_dir() and not _spool_dir_of_other_checkout(d)
            ]
    # crun's state of the container steps (oci.conf's runtime root on each node, one per
    # job user: /run/user/<uid>/crun/<container>): Slurm's step cleanup must have deleted
    # it, also after scancel or a time limit
    for node, root in node_roots(env).items():
        for user_root in sorted((root / "run" / "user").glob("[0-9]*/crun")):
            problems += [
                f"container state left on {node} in {user_root.relative_to(root)}: {d.name}"
                for d in sorted(user_root.iterdir())
                if not d.name.startswith(".")  # crun's .cache
            ]
        # an exit code scrun-cdi-run kept for the anchor (scrunlib.exit_record): the anchor
        # reads and removes it, and a step the OOM killer spared keeps none
        problems += [
            f"exit code record left on {node}: {record.relative_to(root)}"
            for record in sorted((root / "run" / "user").glob("[0-9]*/scrun-exit/*"))
        ]
    # what scrun.lua staged into the shared scratch dir: their stage-out removes it
    problems += [f"staged copy left in the shared dir: {d}" for d in staged_copies(env)]
    # its image cache keeps images, but no mark of a container that is gone
    problems += [f"image cache entry still marked in use: {mark}" for mark in in_use_marks(env)]
    return problems


def list_jobs(env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`squeue`: every job, a line each (id, name, state, nodes, comment)."""
    return run(program("squeue", env)["-h", "-o", "%i %j %T %N %k"], timeout=30, env=env)


def scrun_jobs(squeue_lines: str) -> list[str]:
    """The lines of list_jobs's output of jobs scrun allocated (their comment, its tag)."""
    return [
        line
        for line in squeue_lines.splitlines()
        if tagged_container([*line.split(maxsplit=4), ""][4].strip()) is not None
    ]


def staged_copies(env: Mapping[str, str]) -> list[Path]:
    """The containers' copies in the shared dir (<dir>/<uid>/scrun/<id> for the cluster's
    docs/scrun-lua/shared-scratch.lua, <dir>/<uid>/slurm/scrun/<id> for the man page's)."""
    shared = Path(env.get("SCRUN_SHARED_DIR", "/nonexistent"))
    return [
        d
        for pattern in ("[0-9]*/scrun/*", "[0-9]*/slurm/scrun/*")
        for d in sorted(shared.glob(pattern))
    ]


def in_use_marks(env: Mapping[str, str]) -> list[Path]:
    """The marks of the containers using each image cache entry in the shared dir."""
    shared = Path(env.get("SCRUN_SHARED_DIR", "/nonexistent"))
    return sorted(shared.glob("[0-9]*/scrun-cache/*/users/*"))


def clear_shared_leftovers(env: Mapping[str, str]) -> None:
    """Cancel scrun's jobs and remove what the shared dir keeps of containers, after a test
    that left them: each later test is then judged on what it leaves itself (one staged
    copy left would otherwise fail every test after it)."""
    jobs = [line.split()[0] for line in scrun_jobs(list_jobs(env).stdout)]
    if jobs:
        run(program("scancel", env)[jobs], timeout=30, env=env)
    for copy in staged_copies(env):
        shutil.rmtree(copy, ignore_errors=True)
    for mark in in_use_marks(env):
        mark.unlink(missing_ok=True)


def node_roots(env: Mapping[str, str]) -> dict[str, Path]:
    """Each compute node's `/` as this host sees it: `/proc/<slurmd pid>/root`, whose paths
    resolve in the node's own mount namespace (harness/node.sh)."""
    run = Path(env["SCRUN_CLUSTER_DIR"]) / "run"
    roots = {}
    for pidfile in sorted(run.glob("ourpid.slurmd-*")):
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            continue
        roots[pidfile.name.removeprefix("ourpid.slurmd-")] = Path(f"/proc/{pid}/root")
    return roots


def assert_no_leftovers(env: Mapping[str, str], timeout: float = 10.0) -> None:
    """No job of scrun's (tagged with a container id) in squeue, no scrun-anchor process, no
    container directory in the default spool root, no container state in the oci.conf
    runtime root of any node, no staged copy in the shared dir. Polls up to `timeout` s: podman's
    cleanup (conmon's exit command) and Slurm's job completion run after podman returns."""
    wait_for_clean(lambda: leftovers(env), timeout)


@pytest.fixture
def no_leftovers(cluster: Cluster) -> Iterator[Callable[..., None]]:
    """Checks for leftovers after the test; call the yielded function to check earlier."""

    def check(timeout: float = 10.0) -> None:
        assert_no_leftovers(cluster.env, timeout=timeout)

    yield check
    try:
        check()
    except BaseException:
        clear_shared_leftovers(cluster.env)
        raise


# ----------------------------------------------------------------------------- scrun.lua

SEED_SCRIPT = REPO / "tests" / "lua" / "seed_scrun.lua"
# Slurm 26.05's own example (scrun(1) of slurm-client 26.05.5), verbatim
MAN_26_05_SCRIPT = REPO / "tests" / "lua" / "man_26_05_scrun.lua"
SCRATCH_LINE = 'local scratch_path = "/run/user"'


def with_scratch_path(script: Path, scratch: str) -> str:
    """One of the man page's example scrun.lua scripts with only its scratch_path changed.
    As shipped they stage into /run/user on the login host, which no compute node sees; a
    site points them at a filesystem its nodes share."""
    text = script.read_text()
    assert text.count(SCRATCH_LINE) == 1, f"{script}: no {SCRATCH_LINE!r}"
    return text.replace(SCRATCH_LINE, f'local scratch_path = "{scratch}"')


def with_cluster_staging(cluster: Cluster, hooks: str) -> str:
    """A scrun.lua of `hooks` that carry the container to the nodes as the cluster's own
    scrun.lua does: that script's hooks become `cluster_stage_in` and `cluster_stage_out`,
    for `hooks` to call."""
    return with_staging((Path(cluster.slurm_conf).parent / "scrun.lua").read_text(), hooks)


def with_staging(staging: str, hooks: str) -> str:
    """A scrun.lua of `hooks` that carry the container to the nodes as the scrun.lua
    `staging` does: its hooks become `cluster_stage_in` and `cluster_stage_out`."""
    for hook in ("stage_in", "stage_out"):
        old = f"function slurm_scrun_{hook}("
        assert staging.count(old) == 1, f"the staging scrun.lua has no {old}"
        staging = staging.replace(old, f"function cluster_{hook}(")
    body, returned, _ = staging.rpartition("return slurm.SUCCESS")
    assert returned, "the staging scrun.lua does not end in return slurm.SUCCESS"
    return body + hooks


def with_scratch(script: str, shared: str) -> str:
    """docs/scrun-lua/SCRIPT with its `scratch` set to the shared dir, as a site sets it."""
    text = (REPO / "docs" / "scrun-lua" / script).read_text()
    line = 'local scratch = "/scratch"'
    assert text.count(line) == 1, f"{script}: no {line!r}"
    return text.replace(line, f'local scratch = "{shared}"')


@pytest.fixture
def private_staging(cluster: Cluster) -> Iterator[tuple[Path, str]]:
    """A scratch (under the shared dir) and a node-local directory (on every node) of this
    test's own, each mode 1777 as a site's: caches no other test filled or uses. The node
    directory is named by its path on the nodes. Afterwards nothing staged may be left in
    them (staged_leftovers); then both are removed."""
    name = f"private-{uuid.uuid4().hex[:10]}"
    scratch = Path(cluster["SCRUN_SHARED_DIR"]) / name
    on_nodes = [root / "tmp" / name for root in node_roots(cluster.env).values()]
    for directory in (scratch, *on_nodes):
        directory.mkdir()
        directory.chmod(0o1777)
    try:
        yield scratch, f"/tmp/{name}"
        wait_for_clean(lambda: staged_leftovers(scratch, on_nodes), timeout=10.0)
    finally:
        for directory in (scratch, *on_nodes):
            shutil.rmtree(directory)


def staged_leftovers(scratch: Path, on_nodes: list[Path]) -> list[str]:
    """What the shipped scripts staged into a private scratch and the nodes' private
    directories (seen from here) that is still there: any user's staged copies
    (<scratch>/<uid>/scrun/<id>, <node>/scrun-<uid>/<id>) and marks of entries in use in
    their caches (the entries themselves stay, for the next container of the image)."""
    found = [*scratch.glob("[0-9]*/scrun/*"), *scratch.glob("[0-9]*/scrun-cache/*/users/*")]
    for node in on_nodes:
        found += [p for p in node.glob("scrun-[0-9]*/*") if p.name != "cache"]
        found += node.glob("scrun-[0-9]*/cache/*/users/*")
    return [f"staged copy or mark left: {path}" for path in sorted(found)]


def with_private_staging(script: str, staging: tuple[Path, str], notice_seconds: int) -> str:
    """docs/scrun-lua/SCRIPT.lua staging into `staging` (private_staging), its notices after
    `notice_seconds`."""
    scratch, node_local = staging
    text = with_scratch(f"{script}.lua", str(scratch))
    settings = {
        "local import_notice_seconds = 3": f"local import_notice_seconds = {notice_seconds}"
    }
    if script == "node-local":
        settings['local node_local = "/tmp"'] = f'local node_local = "{node_local}"'
    for line, value in settings.items():
        assert text.count(line + "\n") == 1, line
        text = text.replace(line + "\n", value + "\n")
    return text


@pytest.fixture(scope="session")
def seed_script(cluster: Cluster) -> str:
    """The man page's example scrun.lua staging into the cluster's shared dir, as text."""
    return with_scratch_path(SEED_SCRIPT, cluster["SCRUN_SHARED_DIR"])


@dataclass(frozen=True)
class SiteRuntime:
    """scrun against a private copy of the cluster's config dir, with its own scrun.lua.

    scrun finds scrun.lua beside slurm.conf, and under podman 4 it finds slurm.conf only
    through its site config file. So this makes `dir/etc/{slurm.conf,oci.conf,scrun.lua}`,
    a site config naming that slurm.conf, a `scrun` wrapper that sets SCRUN_SITE_CONFIG, and
    a containers.conf registering the wrapper as runtime `scrun`: the shared cluster, the
    test's own staging script, no effect on tests running beside it. podman 5 hands its
    caller's environment on to the runtime, and SLURM_CONF there wins over the site config:
    a caller runs podman with `env`, whose SLURM_CONF names the same copy.
    """

    dir: Path
    slurm_conf: str
    containers_conf: str
    env: dict[str, str] = field(repr=False)  # for scrun and podman: both use this site

    def podman(
        self, *args: str, timeout: float = 180.0, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """`podman --runtime scrun ARGS` with this site (helpers.run's keyword arguments)."""
        return run(scrun_podman(*args), timeout=timeout, env=self.env, **kwargs)

    def scrun(
        self, *args: str, timeout: float = 180.0, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """This site's `scrun ARGS` (helpers.run's keyword arguments)."""
        return run(local[str(self.dir / "scrun")][args], timeout=timeout, env=self.env, **kwargs)


def slurm_bin_dir(cluster: Cluster) -> Path:
    """Where the cluster's Slurm commands are."""
    return Path(shutil.which("srun", path=cluster.env["PATH"]) or "/usr/bin/srun").parent


@pytest.fixture
def site_runtime(cluster: Cluster, tmp_path: Path) -> Callable[..., SiteRuntime]:
    """`site_runtime(lua_text, settings={...}, bin_dir=...)` → a SiteRuntime whose scrun.lua
    is `lua_text` (None: none), whose site config adds `settings` (numbers) and finds Slurm's
    commands in `bin_dir` (default: the cluster's)."""

    def make(
        lua_text: str | None,
        settings: Mapping[str, float] | None = None,
        bin_dir: Path | None = None,
    ) -> SiteRuntime:
        base = tmp_path / "site"
        etc = base / "etc"
        etc.mkdir(parents=True)
        source_etc = Path(cluster.slurm_conf).parent
        for name in ("slurm.conf", "oci.conf", "cgroup.conf", "plugstack.conf"):
            if (source_etc / name).exists():
                (etc / name).write_text((source_etc / name).read_text())
        if lua_text is not None:
            (etc / "scrun.lua").write_text(lua_text)
        site_config = base / "scrun.toml"
        bin_dir = bin_dir or slurm_bin_dir(cluster)
        extra = "".join(f"{key} = {value}\n" for key, value in (settings or {}).items())
        site_config.write_text(
            f'slurm_conf = "{etc / "slurm.conf"}"\nbin_dir = "{bin_dir}"\n{extra}'
        )
        wrapper = base / "scrun"
        wrapper.write_text(
            f"#!/bin/sh\nSCRUN_SITE_CONFIG={shlex.quote(str(site_config))} "
            f'exec {shlex.quote(str(REPO / ".venv/bin/scrun"))} "$@"\n'
        )
        wrapper.chmod(0o755)
        original = Path(cluster.containers_conf).read_text()
        runtimes = f'[engine.runtimes]\nscrun = ["{wrapper}"]'
        containers_conf = base / "containers.conf"
        containers_conf.write_text(
            original.replace(original[original.index("[engine.runtimes]") :], runtimes + "\n")
        )
        env = {
            **cluster.env,
            "CONTAINERS_CONF": str(containers_conf),
            "SLURM_CONF": str(etc / "slurm.conf"),
            "SCRUN_SITE_CONFIG": str(site_config),
        }
        for path in (tmp_path, base, etc):  # job users must be able to read the configs
            path.chmod(0o755)
        return SiteRuntime(base, str(etc / "slurm.conf"), str(containers_conf), env)

    return make
