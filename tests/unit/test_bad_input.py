"""The bad-input campaign: seeded, bounded, thousands of cases. Every one must end with exit 0
or one `scrun: error: …` line (never a traceback), within CASE_SECONDS, leaving no container
directory under the root and no job.

scrun runs in this process (`scrun_cli.main.main`; `create` forks its anchor, as always)
against a fake Slurm: shell scripts in a bin_dir named by a site config. The fake salloc
refuses every allocation unless the campaign grants it (then it runs the job holder, as
salloc does, and its pid is the "job": alive until scancel or the holder ends it). The
cases that need the real Slurm (the same checks on squeue) are in
tests/integration/test_bad_input_cluster.py. 6,574 cases in all (README.md says so): 1,152
config.json cuts and corruptions, 576 wrong types and extreme values, 770 hostile SCRUN_*
values, 60 hostile environments, 4,000 command lines, 11 of the other tools, 2 of the handler,
2 --pid-files that cannot be written and the valid baseline.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import signal
import time

import pytest
from scrun_cli.main import main
from scrunlib.job_options import VARIABLES
from scrunlib.log import ENV_VARIABLES as LOG_VARIABLES
from waiting import wait_for

CASE_SECONDS = 20.0
SEED = 21

# create forks its anchor. scrun itself is single-threaded there; this test process may hold
# threads of earlier tests (pytest-subprocess's fake waits, plumbum's timeout thread), which
# Python 3.12+ warns about on every fork. They hold no lock the anchor takes; a deadlocked
# anchor would end its case as CaseHung, a failure, not a hang.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)

FAKE_SALLOC = """#!/bin/sh
d=$(dirname "$0")
echo "salloc $*" >> "$d/calls"
[ -e "$d/grant" ] || { echo "salloc: error: Job submit/allocate failed: fake refusal" >&2; exit 1; }
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
echo $$ >> "$d/jobs"
SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=fakenode exec "$@"
"""
FAKE_SCANCEL = """#!/bin/sh
d=$(dirname "$0")
echo "scancel $*" >> "$d/calls"
for pid in $(cat "$d/jobs" 2>/dev/null); do kill "$pid" 2>/dev/null; done
exit 0
"""
FAKE_SCONTROL = """#!/bin/sh
echo "scontrol $*" >> "$(dirname "$0")/calls"
echo "JobId=4242 JobName=scrun UserId=root(0) GroupId=root(0) JobState=RUNNING \
Partition=debug NodeList=fakenode NumNodes=1 NumCPUs=1 NumTasks=1 Comment=x"
"""
FAKE_SRUN = """#!/bin/sh
echo "srun $*" >> "$(dirname "$0")/calls"
[ "$1" = --version ] && { echo "slurm 22.05.8"; exit 0; }
exit 1
"""
FAKE_SQUEUE = """#!/bin/sh
echo "squeue $*" >> "$(dirname "$0")/calls"
"""

CONFIG = {
    "ociVersion": "1.0.2",
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0, "additionalGids": [0, 10]},
        "args": ["/bin/sh", "-c", "echo hi"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
        "cwd": "/",
        "capabilities": {"bounding": ["CAP_CHOWN", "CAP_KILL"], "effective": ["CAP_KILL"]},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}],
        "noNewPrivileges": True,
    },
    "root": {"path": "rootfs", "readonly": False},
    "hostname": "c1",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]},
        {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["ro"]},
    ],
    "annotations": {"io.container.manager": "libpod", "org.opencontainers.image.stopSignal": "15"},
    "hooks": {"prestart": [{"path": "/usr/bin/true", "args": ["true"], "timeout": 5}]},
    "linux": {
        "namespaces": [{"type": "pid"}, {"type": "mount"}],
        "cgroupsPath": "machine.slice:libpod:c1",
        "resources": {"memory": {"limit": 1073741824}, "cpu": {"shares": 1024}},
        "maskedPaths": ["/proc/kcore"],
    },
}

# values that break types, ranges and text in every way JSON can
HOSTILE_JSON: list[object] = [
    None,
    True,
    0,
    -1,
    2**63,
    -(2**200),
    1e308,
    -0.0,
    "",
    " ",
    "x" * 100_000,
    "../../etc",
    "\u0000\u001f\ud800",
    [],
    [None],
    [[]],
    {},
    {"": {}},
]
# environment values that break every kind of SCRUN_* value (no NUL: the kernel refuses it)
HOSTILE_TEXT = [
    "",
    " ",
    "0",
    "-1",
    "9" * 400,
    "1e999",
    "nan",
    "inf",
    "--partition=other",
    "-p x",
    "a\nb",
    "a\tb",
    "\x01\x7f",
    "é日本\U0001f600",
    "\udcff",  # what os.environ gives for an undecodable byte
    "$(touch /tmp/scrun-pwned)",
    "`id`; rm -rf /",
    ",,,",
    "1-",
    "-5-3",
    "%n%s%x",
    "/",
    "../..",
    "x" * 100_000,
    "0x10",
    "1:2:3:4:5",
    "TERM@-1",
    "gpu:-1",
]
SCRUN_VARIABLES = sorted(
    {variable.name for variable in VARIABLES}
    | set(LOG_VARIABLES)
    | {"SCRUN_CONTAINER_ID", "SCRUN_FOO", "SCRUN_"}
)  # SCRUN_SITE_CONFIG: in test_hostile_environment (a missing file means the defaults,
#    and the system's Slurm commands must never run here)


class CaseHung(BaseException):
    """Raised by the alarm: not an Exception, so scrun's own handler cannot swallow it."""


class Campaign:
    """A root, a bundle and a fake Slurm; `run` is one case with all the checks."""

    def __init__(self, tmp_path, capfd):
        self.capfd = capfd
        self.root = tmp_path / "root"
        self.bin = tmp_path / "slurm-bin"
        self.bin.mkdir()
        for name, text in (
            ("salloc", FAKE_SALLOC),
            ("scancel", FAKE_SCANCEL),
            ("scontrol", FAKE_SCONTROL),
            ("srun", FAKE_SRUN),
            ("squeue", FAKE_SQUEUE),
        ):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        (tmp_path / "slurm.conf").write_text("ClusterName=fake\n")
        self.site = tmp_path / "scrun.toml"
        self.site.write_text(
            f'bin_dir = "{self.bin}"\nslurm_conf = "{tmp_path / "slurm.conf"}"\n'
            "lua_timeout = 5\nstep_grace = 1\n"
        )
        self.bundle = tmp_path / "bundle"
        (self.bundle / "rootfs").mkdir(parents=True)
        self.write_config(CONFIG)
        self.cwd = tmp_path / "cwd"
        self.cwd.mkdir()
        self.base_env = {
            "PATH": "/usr/bin:/bin",
            "SCRUN_SITE_CONFIG": str(self.site),
            "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
        }
        self.count = 0
        self.children_before = _children()

    def end(self) -> None:
        """After the test, passed or failed: a case that failed may have left its fake job
        (salloc's holder, its own process group) and its forked anchor running; both are
        killed, so that they outlive neither the test nor pytest."""
        jobs = self.bin / "jobs"
        pids = [int(word) for word in jobs.read_text().split()] if jobs.exists() else []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        for pid in _children() - self.children_before:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        _reap_children()

    def write_config(self, config) -> None:
        self.write_raw(json.dumps(config).encode())

    def write_raw(self, data: bytes) -> None:
        (self.bundle / "config.json").write_bytes(data)

    def grant(self, on: bool) -> None:
        marker = self.bin / "grant"
        if on:
            marker.touch()
        else:
            marker.unlink(missing_ok=True)

    def scrun(self, argv, env=None) -> tuple[int, str]:
        """One scrun call in this process, with exactly `env` (the base one by default)."""
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.base_env if env is None else env)
        previous = signal.signal(signal.SIGALRM, _hung)
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        started = time.monotonic()
        try:
            os.chdir(self.cwd)
            code = main(argv)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.environ.clear()
            os.environ.update(saved)
        assert time.monotonic() - started < CASE_SECONDS
        return code, self.capfd.readouterr().err

    def run(self, argv, env=None, *, chatty: bool = False) -> int:
        """One case: the call, then what must hold after it. `chatty`: the environment
        chose the log levels, so only the last line (if any) is the error."""
        self.count += 1
        code, err = self.scrun(argv, env)
        case = f"case {self.count}: scrun {argv!r} -> {code}, stderr {err[:2000]!r}"
        assert "Traceback" not in err, case
        assert "internal error" not in err, case
        lines = err.splitlines()
        if code != 0 and (lines or not chatty):  # a quiet level (SCRUN_DEBUG=0): no line
            assert lines and lines[-1].startswith("scrun: error: "), case
            assert chatty or len(lines) == 1, case
        if code == 0 and argv[-2:-1] != ["delete"] and "create" in argv:
            self.scrun(["--root", str(self.root), "delete", "--force", argv[-1]])
        self.assert_nothing_left(case)
        return code

    def assert_nothing_left(self, case: str) -> None:
        if self.root.exists():
            leftovers = [path.name for path in self.root.iterdir() if not path.name.startswith(".")]
            assert leftovers == [], case
        jobs = self.bin / "jobs"
        if jobs.exists():
            pids = [int(word) for word in jobs.read_text().split()]
            wait_for(
                f"{case}: the fake job's end", lambda: not any(map(_alive, pids)), CASE_SECONDS
            )
            jobs.unlink()
        _reap_children()


def _hung(signum, frame):
    raise CaseHung(f"a case ran longer than {CASE_SECONDS} s")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stream:
            return stream.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _children() -> set[int]:
    """This process's children, from each of its threads' /proc children list."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as stream:
            found.update(int(word) for word in stream.read().split())
    return found


def _reap_children() -> None:
    """The anchors are this process's forked children: reap those that have exited."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@pytest.fixture
def campaign(tmp_path, capfd):
    cwd = os.getcwd()
    campaign = Campaign(tmp_path, capfd)
    try:
        yield campaign
    finally:
        os.chdir(cwd)
        campaign.end()


def create_argv(campaign: Campaign, container_id: str) -> list[str]:
    return ["--root", str(campaign.root), "create", "--bundle", str(campaign.bundle), container_id]


def test_the_valid_bundle_is_created_and_deleted(campaign):
    """The baseline the mutations start from: it works, so the cases below fail for what
    they change."""
    campaign.grant(True)
    assert campaign.run(create_argv(campaign, "ok")) == 0
    assert "salloc" in (campaign.bin / "calls").read_text()


def test_truncated_and_corrupted_config_json(campaign):
    """config.json cut every 3 bytes, and with bytes replaced, inserted and dropped (invalid
    UTF-8 too): each is one line, no traceback, nothing left."""
    rng = random.Random(SEED)
    text = json.dumps(CONFIG, indent=2).encode()
    variants = [text[:cut] for cut in range(0, len(text), 3)]
    for _ in range(600):
        at = rng.randrange(len(text))
        junk = bytes([rng.randrange(256)]) * rng.randrange(1, 3)
        variants.append(rng.choice([text[:at] + junk + text[at + 1 :], text[:at] + text[at + 2 :]]))
    campaign.grant(True)  # a variant that is still a valid config is created, then deleted
    for number, variant in enumerate(variants):
        campaign.write_raw(variant)
        campaign.run(create_argv(campaign, f"cut{number}"))
    assert campaign.count == len(variants) > 1000


def _paths(value, path=()):
    """Every path in a JSON document (a tuple of keys and indexes)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _replaced(document, path, value):
    result = copy.deepcopy(document)
    if not path:
        return value
    target = result
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return result


def test_wrong_types_and_extreme_values_at_every_path(campaign):
    """Every node of config.json replaced by each HOSTILE_JSON value. What passes the bundle
    check gets a (fake) job and goes through everything create does with config.json."""
    rng = random.Random(SEED)
    paths = list(_paths(CONFIG))
    # all values where scrun reads config.json itself, a seeded sample of 5 elsewhere (each
    # case that passes the bundle check costs a create and a delete: ~45 ms)
    cases = [
        (path, value)
        for path in paths
        for value in (HOSTILE_JSON if _read_by_scrun(path) else rng.sample(HOSTILE_JSON, 5))
    ]
    campaign.grant(True)
    for number, (path, value) in enumerate(cases):
        campaign.write_config(_replaced(CONFIG, path, value))
        campaign.run(create_argv(campaign, f"type{number}"))
    assert campaign.count == len(cases) > 500


def _read_by_scrun(path) -> bool:
    return (
        not path
        or path[0] in ("ociVersion", "root", "annotations")
        or path[:2]
        in (
            ("process", "args"),
            ("process", "env"),
            ("process", "cwd"),
            ("process", "terminal"),
        )
    )


def test_every_scrun_variable_with_hostile_values(campaign):
    """Each SCRUN_* variable (and logging's, an unknown one) with HOSTILE_TEXT values;
    salloc refuses, so each ends with one line: the refusal or what
    is wrong with the value."""
    campaign.write_config(CONFIG)
    campaign.grant(False)
    rng = random.Random(SEED)
    number = 0
    for name in SCRUN_VARIABLES:
        # a seeded sample of 10 values per variable: each case forks an anchor (~35 ms)
        for value in rng.sample(HOSTILE_TEXT, 10):
            number += 1
            env = {**campaign.base_env, name: value}
            chatty = name in LOG_VARIABLES
            campaign.run(create_argv(campaign, f"env{number}"), env, chatty=chatty)
    assert campaign.count == len(SCRUN_VARIABLES) * 10 > 500


def test_hostile_environment(campaign):
    """What else a caller's environment can hold: no PATH, odd runtime directories, a
    slurm.conf that is not one, Slurm's own input variables, a huge environment."""
    campaign.grant(False)
    tmp = campaign.root.parent
    (tmp / "afile").write_text("x")
    (tmp / "writable").mkdir(mode=0o777)
    (tmp / "writable").chmod(0o777)
    (tmp / "link").symlink_to(tmp / "writable")
    for env in ({}, {"PATH": ""}):  # the default root (without a site config: no create)
        for argv in (["state", "x"], ["list"], ["delete", "--force", "x"]):
            campaign.run(argv, env)
    envs = [
        {"SCRUN_SITE_CONFIG": str(campaign.site)},
        {**campaign.base_env, "XDG_RUNTIME_DIR": str(tmp / "afile")},
        {**campaign.base_env, "XDG_RUNTIME_DIR": str(tmp / "writable")},
        {**campaign.base_env, "XDG_RUNTIME_DIR": str(tmp / "link")},
        {**campaign.base_env, "XDG_RUNTIME_DIR": "relative/dir"},
        {**campaign.base_env, "SLURM_CONF": str(tmp / "afile")},
        {**campaign.base_env, "SLURM_CONF": "/nonexistent/slurm.conf"},
        {**campaign.base_env, "SCRUN_SITE_CONFIG": str(tmp / "afile")},
        {**campaign.base_env, "SCRUN_SITE_CONFIG": str(tmp)},
        {**campaign.base_env, "SLURM_JOB_ID": "abc"},
        {**campaign.base_env, "SLURM_JOB_ID": "99999999999999999999"},
        {**campaign.base_env, "SLURM_JOB_ID": "-1"},
        {**campaign.base_env, "SALLOC_PARTITION": "x", "SLURM_TIMELIMIT": "-1"},
        {**campaign.base_env, **{f"SCRUN_X{n}": "y" * 1000 for n in range(300)}},
        {**campaign.base_env, "HOME": "/nonexistent", "USER": "", "LANG": "xx_XX.bogus"},
    ]
    (tmp / "bad.toml").write_text('bin_dir = 3\nunknown = "x"\n')
    envs.append({**campaign.base_env, "SCRUN_SITE_CONFIG": str(tmp / "bad.toml")})
    (tmp / "broken.toml").write_text('bin_dir = "unterminated\n')
    envs.append({**campaign.base_env, "SCRUN_SITE_CONFIG": str(tmp / "broken.toml")})
    for number, env in enumerate(envs):
        for argv in (create_argv(campaign, f"henv{number}"), ["state", "x"], ["list"]):
            campaign.run(argv, env)
    assert campaign.count == 6 + 3 * len(envs)


WORDS = [
    "create",
    "start",
    "state",
    "kill",
    "delete",
    "exec",
    "run",
    "list",
    "features",
    "version",
    "pause",
    "ps",
    "frob",
    "--bundle",
    "-b",
    "--pid-file",
    "--console-socket",
    "--config",
    "--force",
    "-f",
    "--all",
    "-a",
    "--root",
    "--log",
    "--log-format",
    "--debug",
    "-v",
    "--help",
    "--rootless",
    "--preserve-fds",
    "--detach",
    "-d",
    "--keep",
    "--tty",
    "-t",
    "--process",
    "--format",
    "--cwd",
    "--env",
    "--user",
    "-u",
    "--",
    "-",
    "",
    " ",
    "c1",
    "../x",
    "a/b",
    ".",
    "..",
    "x" * 300,
    "9",
    "-9",
    "TERM",
    "SIGKILL",
    "99999",
    "0",
    "json",
    "table",
    "bogus",
    "é",
    "\udcff",
    "--bundle=",
    "--root=",
    "-e",
    "A=B",
    "true",
    "false",
    "--no-such",
]


def _paths_for(campaign: Campaign) -> list[str]:
    tmp = campaign.root.parent
    return [str(campaign.bundle), str(tmp / "nonexistent"), str(tmp / "cwd"), "/dev/null"]


def test_random_command_lines(campaign):
    """4,000 random command lines from scrun's words, options, ids and paths (the root is
    always the campaign's own, given first or by XDG_RUNTIME_DIR)."""
    rng = random.Random(SEED)
    campaign.grant(False)
    paths = _paths_for(campaign)
    for _ in range(4000):
        words = [rng.choice(WORDS + paths) for _ in range(rng.randrange(0, 7))]
        if rng.random() < 0.7:
            words.insert(0, rng.choice(["create", "run", "kill", "delete", "exec", "state"]))
        words = [word for word in words if word not in ("--root", "--root=", "--log")]
        code = campaign.run(["--root", str(campaign.root), *words])
        assert code in (0, 1, 2), words
    assert campaign.count == 4000


def test_other_tools_print_one_line_for_bad_input(tmp_path, capfd):
    """scrun-stage and scrun-lua-check: a broken bundle, a missing script, bad options."""
    from scrun_lua_check.main import main as lua_check_main
    from scrun_stage.main import main as stage_main

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"process": ')
    script = tmp_path / "scrun.lua"
    script.write_text("function slurm_scrun_stage_in() return slurm.SUCCESS end\n")
    cases = [
        (stage_main, ["in", "--bundle", str(bundle)]),
        (stage_main, ["in", "--bundle", str(tmp_path / "nope")]),
        (stage_main, ["frob"]),
        (stage_main, ["in", "--bundle", str(bundle), "--timeout", "x"]),
        (lua_check_main, [str(tmp_path / "nope.lua")]),
        (lua_check_main, ["--bundle", str(bundle), "--dry-run", str(script)]),
        (lua_check_main, ["--job-id", "x"]),
    ]
    for tool, argv in cases:
        try:
            code: object = tool(argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capfd.readouterr().err
        assert code != 0, argv
        assert "Traceback" not in err and len(err.splitlines()) == 1, (argv, err)
        assert ": error: " in err, (argv, err)


def test_an_unexpected_exception_is_one_line_and_a_traceback_only_with_debug(campaign, monkeypatch):
    """The top-level handler: what is not a ScrunError is a bug, reported in one line."""
    from scrun_cli import state

    def broken(ctx, argv):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(state, "run", broken)
    code, err = campaign.scrun(["state", "x"])
    assert code == 1
    assert err == (
        "scrun: error: internal error: ZeroDivisionError: boom "
        "(a bug in scrun; --debug prints the traceback)\n"
    )
    code, err = campaign.scrun(["--debug", "state", "x"])
    assert code == 1
    assert "Traceback" in err and "ZeroDivisionError: boom" in err
    assert "└ ['state', 'x']" in err, err  # loguru's diagnose: a frame's values beside it
    assert err.splitlines()[-1].startswith("scrun: error: internal error: ZeroDivisionError")


@pytest.mark.parametrize("tool", ["scrun-stage", "scrun-lua-check"])
def test_the_other_tools_report_a_bug_in_one_line(tool, tmp_path, capfd, monkeypatch):
    from scrun_lua_check import main as lua_check
    from scrun_stage import main as stage

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(CONFIG))
    if tool == "scrun-stage":
        monkeypatch.setattr(stage, "run", broken)
        argv = ["in", "--bundle", str(bundle)]
        call = stage.main
    else:
        monkeypatch.setattr(lua_check, "run", broken)
        argv = [str(tmp_path / "scrun.lua")]
        call = lua_check.main
    for debug in (False, True):
        try:
            code: object = call([*argv, "--debug"] if debug else argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capfd.readouterr().err
        assert code != 0
        last = err.splitlines()[-1]
        assert last.startswith(f"{tool}: error: internal error: ZeroDivisionError: boom"), err
        assert ("Traceback" in err) is debug, err
        assert debug or len(err.splitlines()) == 1, err


def test_a_pid_file_where_none_can_be_written_is_one_line_and_leaves_nothing(campaign, tmp_path):
    """--pid-file in a directory that is not there is refused before any job; one that is
    a directory fails at the write, after the job: one line naming it, no internal error,
    the job ended (campaign.run checks both)."""
    campaign.grant(True)
    argv = create_argv(campaign, "p1")
    missing = str(tmp_path / "missing" / "pid")
    assert campaign.run([*argv[:-1], "--pid-file", missing, "p1"]) == 1
    calls = campaign.bin / "calls"
    assert not calls.exists() or "salloc" not in calls.read_text()
    _, err = campaign.scrun([*argv[:-1], "--pid-file", missing, "p1"])
    assert "--pid-file" in err and "does not exist" in err
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert campaign.run([*argv[:-1], "--pid-file", str(directory), "p2"]) == 1
    assert "salloc" in calls.read_text()
