"""`scrun exec`: the process, the node-side command from the site's template or oci.conf,
the srun line, and the refusals that need no Slurm."""

import json
import os
import shlex

import pytest
from scrun_cli.main import main
from scrunlib import exec_process
from scrunlib.errors import InvalidInput, ScrunError
from scrunlib.slurm_commands import exec_argv
from scrunlib.spool import Spool
from scrunlib.state import ContainerState, Status

NAME = "%n.%u.%j.%s.%t"
VALUES = {"n": "n1", "u": "alice", "U": "1000", "j": "42", "s": "0", "t": "0", "Z": "/"}


def test_process_from_podmans_process_json(tmp_path):
    path = tmp_path / "exec-process"
    path.write_text(
        json.dumps(
            {
                "terminal": True,
                "user": {"uid": 1000, "gid": 100, "additionalGids": [100]},
                "args": ["sh", "-c", "echo $A"],
                "env": ["PATH=/bin", "A=b c"],
                "cwd": "/work",
                "capabilities": {"bounding": []},
            }
        )
    )
    process = exec_process.load_process(str(path))
    assert process.args == ("sh", "-c", "echo $A")
    assert process.terminal  # the runtime's --tty, relayed on the node (node_command)
    assert process.runtime_options() == [
        "--cwd", "/work", "--env", "PATH=/bin", "--env", "A=b c", "--user", "1000:100"
    ]  # fmt: skip


def test_the_engines_process_reaches_the_runtime_whole_on_fd_3(tmp_path):
    """What no exec option carries (supplementary groups, umask, capabilities) reaches the
    node's runtime: the engine's process JSON, on fd 3 from a here-document, through the
    shell, as the runtime's --process; its terminal as the runtime gets one."""
    given = {
        "terminal": True,
        "user": {"uid": 0, "gid": 0, "additionalGids": [10, 20], "umask": 63},
        "args": ["sh", "-c", "echo 'a'\"b\"; id"],
        "env": ["A=x\nSCRUN_PROCESS\ny"],  # the here-document's end, inside a string
        "capabilities": {"bounding": ["CAP_CHOWN"]},
    }
    path = tmp_path / "exec-process"
    path.write_text(json.dumps(given))
    process = exec_process.load_process(str(path))
    runtime = tmp_path / "runtime"
    runtime.write_text('#!/bin/sh\n[ "$1" = state ] && exit 0\necho "$@"; cat /dev/fd/3\n')
    runtime.chmod(0o755)
    process.terminal = False  # the relay needs a terminal; its command is the same but --tty
    command = exec_process.node_command(f"{runtime} exec %o c1", process, VALUES)
    import subprocess

    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    options, document = done.stdout.split("\n", 1)
    assert options == "exec --process /dev/fd/3 c1"
    assert json.loads(document) == {**given, "terminal": False}


@pytest.mark.parametrize(
    ("process", "needle"),
    [
        ([], "must be a JSON object"),
        ({"args": "sh"}, "args must be a list of strings"),
        ({"args": ["sh"], "env": [1]}, "env must be a list"),
        ({"args": ["sh"], "user": {"uid": "0"}}, "user.uid must be a number"),
        ({"args": ["sh"], "terminal": "yes"}, "terminal must be a boolean"),
    ],
)
def test_bad_process_files(tmp_path, process, needle):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(process))
    with pytest.raises(InvalidInput, match=needle):
        exec_process.load_process(str(path))


def test_template_from_the_projects_oci_conf():
    oci_conf = (
        'RunTimeQuery="crun --rootless=true --root=/run/user/$(id -u)/crun state '
        f'{NAME} 2>/dev/null || echo {{}}"\n'
        f'RunTimeRun="exec crun --root=/run/user/$(id -u)/crun run --bundle %b {NAME}"\n'
    )
    assert exec_process.template_from_oci_conf(oci_conf) == (
        f"crun --rootless=true --root=/run/user/$(id -u)/crun exec %o {NAME}"
    )
    assert exec_process.template_from_oci_conf('RunTimeRun="crun run %b %n"\n') is None
    # a query that is a shell loop over the step's containers names no one container
    loop = 'RunTimeQuery="s=%n.%u.%j.%s.; for c in $(ls /r); do crun state $c; done; echo {}"\n'
    assert exec_process.template_from_oci_conf(loop) is None


def test_template_runs_under_scrun_cdi_run_where_oci_confs_run_does():
    """So that a command crun cannot start exits 127 or 126 (scrun_cdi.wrapper)."""
    query = f'RunTimeQuery="crun --root=/r state {NAME}"\n'
    for options in ("--bundle %b", "--bundle %b --job %j --node %n"):
        run = f'RunTimeRun="exec /opt/bin/scrun-cdi-run {options} -- crun run {NAME}"'
        assert exec_process.template_from_oci_conf(f"{run}\n{query}") == (
            f"/opt/bin/scrun-cdi-run -- crun --root=/r exec %o {NAME}"
        )
    plain = f'RunTimeRun="exec crun run --bundle %b {NAME}"\n'
    assert exec_process.template_from_oci_conf(plain + query) == f"crun --root=/r exec %o {NAME}"


@pytest.mark.parametrize("before", ["", "exec "])
def test_the_node_waits_for_the_container_with_the_runtime_itself(before):
    """The wrapper runs only run and exec: the state the node waits for is crun's own."""
    process = exec_process.ExecProcess(["true"])
    template = f"{before}/opt/bin/scrun-cdi-run -- crun --root=/r exec %o {NAME}"
    wait, _, run = exec_process.node_command(template, process, VALUES).rpartition("; ")
    assert wait.startswith("i=0; until crun --root=/r state n1.alice.42.0.0 >/dev/null 2>&1 ")
    assert run == f"{before}/opt/bin/scrun-cdi-run -- crun --root=/r exec  n1.alice.42.0.0 true"


def test_node_command_quotes_everything_it_inserts():
    process = exec_process.ExecProcess(["sh", "-c", "echo $HOME; exit 3"], env=["A=x y"])
    command = exec_process.node_command(f"runc --root /r exec %o {NAME} # 100%%", process, VALUES)
    assert command.startswith("runc --root /r exec --env 'A=x y' n1.alice.42.0.0 # 100% ")
    assert shlex.split(command.split("# 100% ", 1)[1]) == ["sh", "-c", "echo $HOME; exit 3"]
    with pytest.raises(ScrunError, match="unknown pattern %b"):
        exec_process.node_command("crun exec %b", process, VALUES)


def test_slurm_26_05_pattern_z_is_the_steps_working_directory():
    process = exec_process.ExecProcess(["true"])
    command = exec_process.node_command("crun exec %o x # in %Z", process, VALUES)
    assert command == "crun exec  x # in / true"


@pytest.mark.parametrize("letter", ["m", "e", "p", "@"])
def test_node_side_patterns_are_refused_with_what_they_are(letter):
    process = exec_process.ExecProcess(["true"])
    with pytest.raises(ScrunError, match=f"%{letter} is .*only slurmstepd knows") as caught:
        exec_process.node_command(f"crun --root=%{letter} exec %o x", process, VALUES)
    if letter == "m":
        assert "Slurm >= 25.05" in str(caught.value)


def test_the_node_waits_for_the_container_before_entering_it():
    process = exec_process.ExecProcess(["true"])
    command = exec_process.node_command(f"crun --root=/r exec %o {NAME}", process, VALUES)
    wait, _, run = command.rpartition("; ")
    assert wait.startswith("i=0; until crun --root=/r state n1.alice.42.0.0 >/dev/null 2>&1 ")
    assert run == "crun --root=/r exec  n1.alice.42.0.0 true"


@pytest.mark.parametrize(
    ("template", "kill"),
    [
        (f"crun --root=/r exec %o {NAME}", f"crun --root=/r kill {NAME} KILL"),
        (  # the wrapper runs only run and exec: the kill is the runtime's own
            f"/opt/bin/scrun-cdi-run -- crun --root=/run/user/$(id -u)/crun exec %o {NAME}",
            f"crun --root=/run/user/$(id -u)/crun kill {NAME} KILL",
        ),
        ("runc exec %o x --extra", None),  # another form: no kill of it
        (f"podman-hpc exec {NAME}", None),
    ],
)
def test_the_anchors_sigkill_is_the_exec_templates_runtime_kill(template, kill):
    """step_signals.kill_on_node runs it on the node, expanded as exec's are."""
    assert exec_process.kill_template(template) == kill
    if kill is not None:
        expanded = exec_process.expand_patterns(kill, {**VALUES, "u": "a b"}, template)
        assert expanded.endswith(" kill n1.'a b'.42.0.0 KILL")


def test_exec_step_runs_one_task_beside_the_container():
    argv = exec_argv("/usr/bin/srun", 42, "n1", "crun exec x true", pty=True)
    assert argv[:3] == ["/usr/bin/srun", "--jobid", "42"]
    assert {"--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--pty"} <= set(argv)
    assert "--chdir=/" in argv  # srun's own cwd may not be on the node
    assert argv[-4:] == ["--", "/bin/sh", "-c", "crun exec x true"]
    assert "--pty" not in exec_argv("/usr/bin/srun", 42, "n1", "c", pty=False)


@pytest.fixture
def no_terminal(monkeypatch):
    """`scrun exec` run by pytest, whose stdio may be a terminal: never one here."""
    monkeypatch.setattr("os.isatty", lambda fd: False)


@pytest.mark.parametrize(
    ("argv", "needle", "code"),
    [
        (["exec", "c"], "exec: no command given", 2),
        (["exec"], "container id not provided", 2),
        (["exec", "never", "true"], "container 'never' does not exist", 1),
        (["exec", "created", "true"], "container 'created' is created: cannot exec", 1),
        (["exec", "-t", "-d", "created", "sh"], "a terminal needs --console-socket", 1),
        (["exec", "--process", "/nonexistent.json", "created"], "cannot read process file", 1),
    ],
)
def test_exec_refusals(root, no_terminal, capsys, argv, needle, code):
    spool = Spool(str(root), "created")
    spool.create()
    ContainerState("created", "/b", "/r", status=Status.CREATED, job_id=5).save(spool)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_command_words_may_look_like_options(root, no_terminal, capsys):
    """Options end at the container id: `-c` belongs to sh."""
    assert main(["exec", "--env", "A=1", "never", "sh", "-c", "true"]) == 1
    assert "container 'never' does not exist" in capsys.readouterr().err


def test_a_terminal_process_starts_once_the_engine_has_sized_its_terminal():
    """The engine sizes the terminal after `exec` has returned (docker's shim): the process
    starts then, and sees that size, not the new pty's 0x0."""
    import fcntl
    import struct
    import subprocess
    import termios
    import time

    from scrunlib import procio

    master, slave = os.openpty()
    argv = procio.when_sized(["/bin/sh", "-c", "stty size"])
    started = time.monotonic()
    child = subprocess.Popen(argv, **procio.srun_stdio(slave))
    assert time.monotonic() - started < 0.5  # the caller does not wait
    os.close(slave)
    time.sleep(0.2)
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 21, 77, 0, 0))
    assert (child.wait(), read_all(master)) == (0, b"21 77\r\n")
    os.close(master)


def test_a_terminal_that_gets_no_size_starts_its_process_after_the_bound():
    """An engine whose client has no terminal (`podman run -t` in a CI job) never sizes it:
    the process starts after the wait's bound (2 s) all the same, and sees no size."""
    import subprocess
    import time

    from scrunlib import procio

    master, slave = os.openpty()
    started = time.monotonic()
    child = subprocess.Popen(
        procio.when_sized(["/bin/sh", "-c", "stty size"]), **procio.srun_stdio(slave)
    )
    os.close(slave)
    output = read_all(master)
    assert (child.wait(), output) == (0, b"0 0\r\n")
    assert 1.5 < time.monotonic() - started < 4
    os.close(master)


def read_all(master: int) -> bytes:
    """What the process on the pty's slave wrote, until it has ended."""
    output = b""
    while True:
        try:
            chunk = os.read(master, 1024)
        except OSError:  # EIO: the process has ended
            break
        if not chunk:
            break
        output += chunk
    return output


def test_a_terminal_is_the_runtimes_relayed_on_the_node_where_python3_is():
    process = exec_process.ExecProcess(["tty"], terminal=True)
    command = exec_process.node_command("crun exec %o c1", process, VALUES)
    relayed = 'crun exec --tty --console-socket "$SCRUN_CONSOLE_SOCKET" c1 tty'
    assert command.endswith(
        f"if command -v python3 >/dev/null 2>&1; then exec python3 -c "
        f"{shlex.quote(exec_process.CONSOLE_RELAY)} /bin/sh -c {shlex.quote(relayed)}; "
        f"else crun exec  c1 tty; fi"  # an empty %o
    ), command
    assert "--tty" not in command.split("; do ")[0]  # the wait for the container: no terminal


# What the node's runtime does with --console-socket: a pty, its master sent over the socket,
# the process writing to the slave; the exit code the process's.
FAKE_RUNTIME = """
import os, socket
master, slave = os.openpty()
with socket.socket(socket.AF_UNIX) as console:
    console.connect(os.environ["SCRUN_CONSOLE_SOCKET"])
    socket.send_fds(console, [b"x"], [master])
os.close(master)
os.write(slave, b"on the container's terminal\\n")
os.close(slave)
raise SystemExit(3)
"""


def test_the_relay_copies_the_runtimes_terminal_and_exits_with_its_code(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", exec_process.CONSOLE_RELAY, sys.executable, "-c", FAKE_RUNTIME],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (3, b"on the container's terminal\r\n"), done.stderr
