"""The anchor's pid namespace (scrunlib.pidns), made by processes.fork in a process of its
own (one that made it cannot fork once its anchor has ended): where we may make one (the
host's root), the forked child is pid 1 of it, its /proc lists only that namespace, and the
host's pids of it and of its children are known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    from scrunlib import pidns, processes

    def anchor():
        sleeper = processes.spawn(["/bin/sleep", "30"], dict(os.environ),
                                  stdin=0, stdout=1, stderr=2)
        report = {
            "pid": os.getpid(),
            "own_pid": pidns.own_pid(),
            "proc": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()),
            "child": sleeper.pid,
            "child_host_pid": sleeper.host_pid(),
        }
        os.write(1, json.dumps(report).encode())
        sleeper.signal(9)
        sleeper.wait_ended()
        return 0

    child = processes.fork(anchor, own_pid_namespace=True)
    sys.stderr.write(str(child.pid))
    sys.exit(child.wait_ended())
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may make a pid namespace here")
def test_the_forked_anchor_is_pid_1_of_a_namespace_and_knows_its_host_pids() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["pid"] == 1
    assert report["own_pid"] == int(done.stderr)  # the pid create's side knows
    assert report["proc"] == [1, report["child"]]  # no host process: not its pid 1 either
    assert report["child_host_pid"] not in (0, report["child"])


def test_without_a_namespace_pids_are_ours() -> None:
    from scrunlib import pidns

    assert pidns.own_pid() == os.getpid() and not pidns.in_own_namespace()
