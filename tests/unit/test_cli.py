"""The scrun command line: runc/crun-compatible parsing, one-line errors, exit codes."""

import json
import os

import pytest
from scrun_cli.kill import parse_signal
from scrun_cli.main import main
from scrunlib import log
from scrunlib.errors import InvalidInput
from waiting import wait_for


def one_error_line(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus", "state", "x"], "unknown option --bogus"),
        (["frob", "x"], "unknown command 'frob'"),
        ([], "no command given"),
        (["state"], "container id not provided"),
        (["state", "a", "b"], "unexpected argument 'b'"),
        (["create", "--bundle"], "needs a value"),
        (["kill", "x", "9", "extra"], "unexpected argument"),
        (["delete", "--nope", "x"], "unknown option --nope"),
    ],
)
def test_usage_errors_exit_2_with_one_line(root, capsys, argv, needle):
    assert main(argv) == 2
    assert needle in one_error_line(capsys)


def test_state_of_unknown_container_fails(root, capsys):
    assert main(["state", "never"]) == 1
    assert "container 'never' does not exist" in one_error_line(capsys)


def test_state_is_one_line_of_json_as_slurm_25_05s_scrun_prints_it(root, capsys):
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState, Status

    spool = Spool(str(root), "oneline")
    spool.create()
    state = ContainerState(
        id="oneline", bundle="/b", rootfs="/b/rootfs", job_id=7, exit_code=3, status=Status.STOPPED
    )
    state.save(spool)
    assert main(["--root", str(root), "state", "oneline"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("}\n") and out.count("\n") == 1, repr(out)
    assert json.loads(out) == state.oci_state()


def test_bad_id_is_refused_before_any_file_is_touched(root, capsys):
    assert main(["state", "../etc"]) == 1
    assert "invalid container id" in one_error_line(capsys)
    assert not root.exists()


def test_delete_force_of_unknown_id_succeeds(root, capsys):
    assert main(["delete", "--force", "never"]) == 0
    assert main(["delete", "-f", "never"]) == 0
    assert main(["delete", "never"]) == 1


def test_delete_force_removes_what_a_create_killed_before_its_state_left(root, capsys):
    bare = root / "killed"
    bare.mkdir(parents=True, mode=0o700)
    (bare / "state.json.123.tmp").write_text("{")
    assert main(["delete", "killed"]) == 1  # no state: no container
    assert bare.exists()
    assert main(["delete", "--force", "killed"]) == 0
    assert not bare.exists()


def test_ignored_runc_options_are_accepted(root, capsys):
    argv = ["--systemd-cgroup", "--cgroup-manager", "x", "--rootless", "--criu=y", "--debug"]
    assert main([*argv, "delete", "--force", "never"]) == 0
    assert main(["--rootless", "true", "--cgroup-manager=disabled", "kill", "--all", "x"]) == 1


def test_json_log_file_gets_the_error(root, tmp_path, capsys):
    log_file = tmp_path / "oci-log"
    assert main(["--log-format=json", "--log", str(log_file), "state", "never"]) == 1
    lines = log_file.read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "error"
    assert entry["msg"] == "container 'never' does not exist"
    assert entry["time"].endswith("Z")
    assert "does not exist" in capsys.readouterr().err


def test_log_file_is_created_even_on_success(root, tmp_path):
    log_file = tmp_path / "log.json"
    assert main(["--log", str(log_file), "--log-format", "json", "delete", "-f", "x"]) == 0
    assert log_file.exists()
    assert log_file.read_text() == ""


@pytest.mark.parametrize(
    ("options", "level"),
    [
        ([], 3),
        (["-v"], 4),
        (["-vv", "-v"], 6),
        (["-v"] * 12, 9),
        (["--debug"], 5),
        (["-vvv", "--debug"], 6),
    ],
)
def test_verbose_and_debug_raise_the_stderr_level(root, options, level):
    try:
        assert main([*options, "delete", "--force", "never"]) == 0
        assert log.settings().stderr == level
    finally:
        log.configure(log.LogSettings())


@pytest.mark.parametrize(("variable", "noted"), [("debug", True), ("info", False)])
def test_ignored_global_options_are_noted_at_the_debug_level_asked_for(
    root, monkeypatch, capsys, variable, noted
):
    """Logging is configured after the global options are read; their notes wait for it."""
    monkeypatch.setenv("SCRUN_STDERR_DEBUG", variable)
    assert main(["--systemd-cgroup", "--cgroup-manager", "cgroupfs", "delete", "-f", "no"]) == 0
    err = capsys.readouterr().err
    assert ("ignoring option --systemd-cgroup" in err) is noted
    assert ("ignoring option --cgroup-manager=cgroupfs" in err) is noted


def test_invalid_debug_variable_names_it(root, monkeypatch, capsys):
    monkeypatch.setenv("SCRUN_DEBUG", "loud")
    assert main(["state", "x"]) == 1
    assert "SCRUN_DEBUG='loud'" in one_error_line(capsys)


def test_bad_log_format(root, capsys):
    assert main(["--log-format", "xml", "state", "x"]) == 2
    assert "unknown log format" in one_error_line(capsys)


def test_help_and_usage_go_to_stdout(root, capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "create" in out and "--root" in out
    assert main(["kill", "--help"]) == 0
    assert "SIGNAL" in capsys.readouterr().out
    assert main(["--usage"]) == 0
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("15", 15),
        ("9", 9),
        ("64", 64),
        ("KILL", 9),
        ("SIGKILL", 9),
        ("sigusr1", 10),
        ("kill", 9),
        ("HUP", 1),
        ("RTMAX", 64),
    ],
)
def test_signal_names_and_numbers(text, number):
    assert parse_signal(text) == number


@pytest.mark.parametrize("text", ["0", "65", "999", "SIGNOPE", "-9", ""])
def test_bad_signals(text):
    with pytest.raises(InvalidInput):
        parse_signal(text)


def test_create_with_bad_bundle_leaves_nothing(root, tmp_path, capsys):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(
        '{"process": {"args": "sh"}, "root": {"path": "r"}}'
    )
    assert main(["create", "--bundle", str(tmp_path / "b"), "c1"]) == 1
    assert "process.args" in one_error_line(capsys)
    assert not (root / "c1").exists()


@pytest.mark.parametrize("command", ["checkpoint", "restore"])
def test_runc_commands_scrun_does_not_have_say_so(root, capsys, command):
    assert main([command, "x"]) == 1
    assert f"does not support {command!r}: a Slurm job step cannot be checkpointed" in (
        one_error_line(capsys)
    )


def test_errors_never_say_no_such_file(root, tmp_path, capsys):
    """Podman and docker turn that phrase into "command not found" (exit 127)."""
    assert main(["--log", str(tmp_path / "missing" / "log.json"), "state", "x"]) == 1
    err = one_error_line(capsys)
    assert "cannot open log file" in err and "does not exist" in err
    assert "No such file" not in err


@pytest.mark.parametrize("command", ["create", "run"])
def test_run_and_create_accept_runc_and_crun_options(root, capsys, command):
    """Ignored ones are accepted; the rest reach the bundle check (here: no bundle)."""
    argv = [command, "--bundle", "/nonexistent", "--no-pivot", "--no-new-keyring"]
    argv += ["--preserve-fds", "2", "--config", "c.json", "--pid-file", "p", "x"]
    if command == "run":
        argv[1:1] = ["-d", "--keep", "--no-subreaper", "--console-socket", "/s"]
    assert main(argv) == 1
    assert "bundle /nonexistent is not a directory" in one_error_line(capsys)


def test_config_option_names_the_missing_file(root, tmp_path, capsys):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    assert main(["create", "--bundle", str(bundle), "--config", "alt.json", "x"]) == 1
    assert f"bundle {bundle} has no alt.json" in one_error_line(capsys)
    assert not (root / "x").exists()


def terminal_bundle(tmp_path):
    bundle = tmp_path / "tty-bundle"
    (bundle / "rootfs").mkdir(parents=True)
    config = {"process": {"args": ["sh"], "terminal": True}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(config))
    return str(bundle)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["create"], "give --console-socket to receive the container's pty"),
        (["run", "-d"], "give --console-socket to receive the container's pty"),
        (["run"], "stdin is not a terminal and no --console-socket was given"),
    ],
)
def test_a_terminal_without_console_socket(root, tmp_path, capsys, monkeypatch, argv, needle):
    """Only `run` in the foreground may give the container the caller's terminal."""
    monkeypatch.setattr("os.isatty", lambda fd: False)  # as under CI, also from a terminal
    assert main([*argv, "--bundle", terminal_bundle(tmp_path), "tty"]) == 1
    assert needle in one_error_line(capsys)
    assert not (root / "tty").exists()


def hung_scancel(tmp_path, monkeypatch) -> None:
    """The site's scancel hangs; Slurm commands get 0.5 s."""
    monkeypatch.setattr("scrunlib.slurm.COMMAND_TIMEOUT", 0.5)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text("#!/bin/sh\nexec sleep 30\n")
    (bin_dir / "scancel").chmod(0o755)
    (tmp_path / "none.toml").write_text(f'bin_dir = "{bin_dir}"\n')


def test_delete_reports_a_hung_scancel_in_one_line(root, tmp_path, monkeypatch, capsys):
    """An anchor died and left its job; scancel then hangs: one error line, no traceback,
    and the state stays for the next delete to retry."""
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState, Status

    hung_scancel(tmp_path, monkeypatch)
    spool = Spool(str(root), "orphan")
    spool.create()
    ContainerState(
        id="orphan", bundle="/b", rootfs="/b/rootfs", status=Status.RUNNING, job_id=5
    ).save(spool)
    assert main(["delete", "orphan"]) == 1
    assert "scancel did not finish in 0.5 s and was killed" in one_error_line(capsys)
    assert os.path.isdir(spool.path)


def stopped_containers(root, *ids: str, job_id: int | None = None) -> None:
    """Containers whose anchors have exited (delete needs no Slurm unless `job_id`)."""
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState, Status

    for container_id in ids:
        spool = Spool(str(root), container_id)
        spool.create()
        status = Status.RUNNING if job_id else Status.STOPPED
        ContainerState(
            id=container_id, bundle="/b", rootfs="/b/rootfs", status=status, job_id=job_id
        ).save(spool)


def containers_left(root) -> list[str]:
    return sorted(name for name in os.listdir(root) if not name.startswith("."))


def test_delete_regex_deletes_every_container_whose_id_it_matches(root, capsys):
    """crun's `delete --regex`: an unanchored search, as its POSIX regexec does."""
    stopped_containers(root, "test-a", "test-b", "atest-c", "other", "t")
    assert main(["delete", "--force", "--regex", "test-*"]) == 0
    assert containers_left(root) == ["other", "t"]
    assert main(["delete", "-r", "^o.*r$"]) == 0
    assert main(["delete", "--regex", "nothing-matches"]) == 0
    assert containers_left(root) == ["t"]
    assert capsys.readouterr().err == ""


def test_delete_regex_refuses_an_invalid_expression(root, capsys):
    stopped_containers(root, "test-a")
    assert main(["delete", "--regex", "test-("]) == 2
    assert "delete: invalid regular expression 'test-('" in one_error_line(capsys)
    assert os.path.isdir(root / "test-a")


def test_delete_regex_goes_on_after_a_failure_and_exits_with_it(
    root, tmp_path, monkeypatch, capsys
):
    hung_scancel(tmp_path, monkeypatch)
    stopped_containers(root, "test-hung", job_id=5)
    stopped_containers(root, "test-gone")
    assert main(["delete", "--force", "--regex", "^test-"]) == 1
    assert "scancel did not finish in 0.5 s and was killed" in one_error_line(capsys)
    assert containers_left(root) == ["test-hung"]


def test_delete_waits_for_a_process_until_it_exits_or_the_time_is_up():
    import subprocess
    import time

    from scrun_cli.delete import wait_gone
    from scrunlib.state import process_start_time

    quick = subprocess.Popen(["sleep", "0.3"])
    began = time.monotonic()
    assert wait_gone(quick.pid, process_start_time(quick.pid), timeout=10)
    assert 0.25 < time.monotonic() - began < 5
    quick.wait()
    slow = subprocess.Popen(["sleep", "30"])
    try:
        assert not wait_gone(slow.pid, process_start_time(slow.pid), timeout=0.2)
    finally:
        slow.kill()
        slow.wait()
    assert wait_gone(slow.pid, None, timeout=0.2)  # reaped: no such process


def fake_srun(tmp_path, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / "srun").chmod(0o755)
    (tmp_path / "none.toml").write_text(f'bin_dir = "{bin_dir}"\n')


def test_version_names_slurms_release_and_remembers_it(root, tmp_path, capsys):
    fake_srun(tmp_path, 'echo asked >> "$0.calls"; echo slurm 23.02.7')
    root.mkdir(mode=0o700)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "slurm: 23.02.7"
    assert (root / ".slurm-version").read_text().endswith("23.02.7\n")  # the anchor's cache
    assert main(["version"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "slurm: 23.02.7"
    assert (tmp_path / "bin" / "srun.calls").read_text() == "asked\n"  # once: then the cache


def test_version_says_why_slurms_release_is_unknown(root, tmp_path, capsys):
    fake_srun(tmp_path, "echo 'srun: fatal: no slurm.conf' >&2; exit 1")
    assert main(["version"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "slurm: unknown (srun --version failed: srun: fatal: no slurm.conf)"


def test_an_undecodable_byte_in_the_input_is_shown_escaped(root, capsys):
    """os.environ and argv hold an undecodable byte as a lone surrogate: the one error line
    shows it as \\udcXX instead of failing to be written."""
    assert main(["state", "bad\udcffid"]) == 1
    line = one_error_line(capsys)
    assert "udcff" in line
    line.encode()  # no surrogate left in it


def test_error_messages_hold_no_surrogates():
    from scrunlib.errors import ScrunError

    assert ScrunError("value \udcff\nnext").message == "value \\udcff next"


FREEZER = "/sys/fs/cgroup/freezer"


class Frozen:
    """A process frozen in a cgroup v1 freezer: SIGKILL waits until it is thawed."""

    def __init__(self, name: str) -> None:
        import subprocess

        self.cgroup = os.path.join(FREEZER, name)
        os.makedirs(self.cgroup, exist_ok=True)
        self.process = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as stream:
            stream.write(str(self.process.pid))
        self._write_state("FROZEN")

    def _write_state(self, state: str) -> None:
        with open(os.path.join(self.cgroup, "freezer.state"), "w") as stream:
            stream.write(state)
        wait_for(f"the cgroup {state}", lambda: self._state() == state, 10)

    def _state(self) -> str:
        with open(os.path.join(self.cgroup, "freezer.state")) as stream:
            return stream.read().strip()

    def thaw(self) -> int | None:
        self._write_state("THAWED")
        try:
            return self.process.wait(timeout=10)
        finally:
            os.rmdir(self.cgroup)


def stopped_process():
    """A `sleep 60` in state T. Until it has stopped, a SIGTERM sent to it would be taken
    before the pending SIGSTOP (the lower number goes first) and end it: -15, not -9."""
    import signal
    import subprocess
    import time

    from scrunlib.state import process_stuck

    process = subprocess.Popen(["sleep", "60"])
    os.kill(process.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while process_stuck(process.pid) != "T":
        assert time.monotonic() < deadline, "sleep 60 did not stop"
        time.sleep(0.01)
    return process


def stuck_container(root, tmp_path, anchor_pid: int, delete_timeout: float):
    """A running container whose anchor is `anchor_pid`, job 5, and a fake scancel."""
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState, Status, process_start_time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scancel.calls\n')
    (bin_dir / "scancel").chmod(0o755)
    (tmp_path / "none.toml").write_text(
        f'bin_dir = "{bin_dir}"\ndelete_timeout = {delete_timeout}\nlua_timeout = 300\n'
    )
    spool = Spool(str(root), "stuck")
    spool.create()
    ContainerState(
        id="stuck",
        bundle="/b",
        rootfs="/b/rootfs",
        status=Status.RUNNING,
        job_id=5,
        anchor_pid=anchor_pid,
        anchor_start_time=process_start_time(anchor_pid),
    ).save(spool)
    return spool


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.isdir(FREEZER), reason="needs root and a v1 freezer"
)
def test_delete_of_a_frozen_anchor_ends_its_job_within_the_bound(root, tmp_path, capsys):
    """The anchor ignores SIGTERM and SIGKILL while frozen: delete waits delete_timeout,
    cancels the job itself, says so in one line and keeps the state (failing; --force
    succeeds, as crun's does); once the anchor is thawed (and so dies of the SIGKILL), a
    later delete finishes."""
    import time

    frozen = Frozen(f"scrun-unit-{os.getpid()}")
    try:
        spool = stuck_container(root, tmp_path, frozen.process.pid, delete_timeout=1)
        for argv, status in ((["delete", "stuck"], 1), (["delete", "--force", "stuck"], 0)):
            started = time.monotonic()
            assert main(argv) == status, argv
            assert time.monotonic() - started < 5, argv
            line = one_error_line(capsys)
            assert f"anchor {frozen.process.pid} cannot be stopped (process state D" in line
            assert "Device or resource busy" in line  # what crun's test_delete accepts
            assert "ended job 5" in line and "stays until `scrun delete stuck`" in line
            assert os.path.isdir(spool.path)
        assert (tmp_path / "scancel.calls").read_text() == "--quiet 5\n" * 2
    finally:
        code = frozen.thaw()
    assert code in (-15, -9)  # the signals delete sent are acted on once it is thawed
    assert main(["delete", "stuck"]) == 0
    assert not os.path.exists(spool.path)


def test_delete_kills_a_stopped_anchor_after_delete_timeout(root, tmp_path, capsys):
    """A stopped anchor (state T) would be waited for lua_timeout + 2 step_grace + 30 s;
    after delete_timeout it gets SIGKILL, which ends it, and the delete completes."""
    import time

    anchor = stopped_process()
    spool = stuck_container(root, tmp_path, anchor.pid, delete_timeout=0.5)
    started = time.monotonic()
    assert main(["delete", "--force", "stuck"]) == 0
    assert time.monotonic() - started < 5
    assert anchor.wait(timeout=5) == -9
    assert (tmp_path / "scancel.calls").read_text() == "--quiet 5\n"  # the leftover job
    assert not os.path.exists(spool.path)


def test_kill_signals_the_step_itself_when_the_anchor_cannot_act(root, tmp_path, capsys):
    """The anchor is stopped: its socket takes the connection but nobody answers. After
    delete_timeout, kill finds the step as the anchor would and signals it with scancel."""
    import socket
    import time

    anchor = stopped_process()
    try:
        spool = stuck_container(root, tmp_path, anchor.pid, delete_timeout=0.5)
        (tmp_path / "bin" / "squeue").write_text('#!/bin/sh\necho "5.0 scrun"; echo "5.1 x"\n')
        (tmp_path / "bin" / "squeue").chmod(0o755)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(spool.socket)
        server.listen(4)  # never accepted: what a frozen anchor's socket does
        started = time.monotonic()
        assert main(["kill", "stuck", "TERM"]) == 0
        assert time.monotonic() - started < 5
        assert (tmp_path / "scancel.calls").read_text() == "--signal=15 5.0\n"
        assert "signal 15 sent with scancel to 5.0" in one_error_line(capsys)
        server.close()
    finally:
        anchor.kill()
        anchor.wait()


def test_exec_detach_writes_the_pid_file_and_leaves_the_step_running(root, tmp_path, capsys):
    """What podman's and docker's exec give: `--pid-file F --detach`. scrun exits 0 at once
    with the pid of the exec's srun in F, and that srun runs the site's exec_command on the
    container's node with the process's args."""
    anchor = stopped_process()
    try:
        stuck_container(root, tmp_path, anchor.pid, delete_timeout=1)
        bin_dir = tmp_path / "bin"
        fakes = {
            "squeue": 'case "$*" in *%N*) echo "5.0 fakenode";; *) echo "5.0 scrun";; esac',
            "scontrol": "echo fakenode",
            "srun": f'echo "$@" > {tmp_path}/srun.args; exec sleep 30',
        }
        for name, body in fakes.items():
            (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / name).chmod(0o755)
        with open(tmp_path / "none.toml", "a") as site:
            site.write('exec_command = "noderuntime exec %o %n.%j.%s"\n')
        pid_file = tmp_path / "exec.pid"
        argv = ["exec", "--pid-file", str(pid_file), "--detach", "stuck", "true", "x"]
        assert main(argv) == 0, capsys.readouterr().err
        pid = int(pid_file.read_text())
        wait_for("the exec's srun started", lambda: (tmp_path / "srun.args").exists(), 10)
        srun_args = (tmp_path / "srun.args").read_text()
        assert "noderuntime exec" in srun_args and "fakenode.5.0" in srun_args, srun_args
        os.kill(pid, 0)  # still running: --detach did not wait for it
        os.kill(pid, 9)
    finally:
        anchor.kill()
        anchor.wait()
