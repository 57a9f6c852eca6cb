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

    report_read, report_write = os.pipe()
    go_read, go_write = os.pipe()

    def anchor():
        os.close(go_write)  # EOF on go_read, should the parent fail
        sleeper = processes.spawn(["/bin/sleep", "30"], dict(os.environ),
                                  stdin=0, stdout=1, stderr=2)
        report = {
            "pid": os.getpid(),
            "own_pid": pidns.own_pid(),
            "proc": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()),
            "child": sleeper.pid,
            "child_host_pid": sleeper.host_pid(),
        }
        os.write(report_write, json.dumps(report).encode())
        os.close(report_write)
        os.read(go_read, 1)  # the parent has listed us
        sleeper.signal(9)
        sleeper.wait_ended()
        return 0

    child = processes.fork(anchor, own_pid_namespace=True)
    os.close(report_write)
    report = json.loads(os.read(report_read, 65536))
    report["forked"] = child.pid
    report["members"] = pidns.members(child.pid)
    report["ours"] = pidns.members(os.getpid())
    os.write(go_write, b"x")
    sys.stdout.write(json.dumps(report))
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
    assert report["own_pid"] == report["forked"]  # the pid create's side knows
    assert report["proc"] == [1, report["child"]]  # no host process: not its pid 1 either
    assert report["child_host_pid"] not in (0, report["child"])
    # what `scrun ps --format json` gives docker's top: the namespace's pids, the host's
    assert report["members"] == sorted([report["forked"], report["child_host_pid"]])
    assert report["ours"] is None  # the host's namespace: not listed


def test_without_a_namespace_pids_are_ours() -> None:
    from scrunlib import pidns

    assert pidns.own_pid() == os.getpid() and not pidns.in_own_namespace()
