"""bench/grant.sh's figures: per runtime, the whole `podman run` and the time from the job's
grant (slurmctld's log) to its step's launch on the node (slurmd's log), from the runs'
lines (runtime, begin, end, exit code, slurmctld log offsets before and after); and where
the runtime's commands and the step's srun fall around them, from bench/execs.py's record
of program starts and ends (EXECS; empty: left out). RUNTIME=PATH: a path in the command
lines of that runtime's commands (upstream's: its bench directory, as its wrapper execs
/usr/bin/scrun, and the command line execs.py reads may be either), to tell its commands
from others' on the machine.

Usage: grant.py RUNS EXECS LIMIT upstream=PATH scrun=PATH SLURMCTLD_LOG SLURMD_LOG...
"""

import re
import statistics
import sys
import time

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})\] ")
GRANT = re.compile(r"(?:_slurm_rpc_allocate_resources|sched: Allocate) JobId=(\d+) NodeList=(\S+)")
LAUNCH = re.compile(r"launch task StepId=(\d+)\.(\d+) request")
STEPD = re.compile(r"\[(\d+)\.(\d+)\] task/cgroup: _memcg_initialize: step:")


def stamp(line: str) -> float | None:
    """The time of a Slurm log line (iso8601_ms, local time) in seconds since the epoch."""
    match = STAMP.match(line)
    if not match:
        return None
    return (
        time.mktime(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")) + int(match.group(2)) / 1000
    )


def grants(path: str, start: int, stop: int) -> list[tuple[str, float]]:
    """The jobs granted nodes in slurmctld's log between two offsets, with the times."""
    with open(path, "rb") as stream:
        stream.seek(start)
        text = stream.read(stop - start).decode(errors="replace")
    found = []
    for line in text.splitlines():
        match = GRANT.search(line)
        when = stamp(line)
        if match and match.group(2) != "(null)" and when is not None:
            found.append((match.group(1), when))
    return found


def node_events(paths: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """Each job's first step launch request and first step cgroup, from the slurmd logs."""
    launch: dict[str, float] = {}
    stepd: dict[str, float] = {}
    for path in paths:
        with open(path, errors="replace") as stream:
            for line in stream:
                for pattern, table in ((LAUNCH, launch), (STEPD, stepd)):
                    match = pattern.search(line)
                    when = stamp(line) if match else None
                    if match and when is not None and match.group(1) not in table:
                        table[match.group(1)] = when
    return launch, stepd


def spread(values: list[float], iqr: bool = True) -> str:
    """Median (min-max, IQR) in ms."""
    if not values:
        return "n/a"
    ms = sorted(v * 1000 for v in values)
    quartiles = ""
    if iqr and len(ms) >= 4:
        q1, _, q3 = statistics.quantiles(ms, n=4)
        quartiles = f", IQR {q3 - q1:.0f}"
    return f"{statistics.median(ms):.0f} ({ms[0]:.0f}–{ms[-1]:.0f}{quartiles})"


# the moments bench/execs.py and the logs show, in the order of a container's start
MARKS = {
    "create": "`create` starts",
    "created": "`create` exits",
    "start": "`start` starts",
    "srun": "the step's srun starts",
    "started": "`start` exits",
    "launch": "launch request on the node",
    "stepd": "step's slurmstepd",
}


def runtime_marks(
    events: list[list[str]], begin: float, end: float, path: str
) -> dict[str, float | None]:
    """When, in one run (begin to end), the runtime at `path` began and ended `create` and
    `start`, and its container's step's srun began: from execs.py's events."""
    found: dict[str, float | None] = dict.fromkeys(MARKS)
    create_pid = start_pid = container = None
    for event in events:
        kind, when_s, pid = event[0], float(event[1]), event[2]
        if not begin <= when_s <= end:
            continue
        line = event[3] if len(event) > 3 else ""
        words = line.split()
        if kind == "exit":
            if pid == create_pid and found["created"] is None:
                found["created"] = when_s
            elif pid == start_pid and found["started"] is None:
                found["started"] = when_s
        elif container is None and path in line and "create" in words and "--bundle" in words:
            found["create"], create_pid, container = when_s, pid, words[-1]
        elif container is None:
            continue
        elif found["start"] is None and path in line and words[-2:] == ["start", container]:
            found["start"], start_pid = when_s, pid
        elif found["srun"] is None and words and words[0].endswith("srun") and container in line:
            found["srun"] = when_s
    return found


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> None:
    runs_path, execs_path, limit, upstream_path, scrun_path, ctld_log, *node_logs = sys.argv[1:]
    launch, stepd = node_events(node_logs)
    with open(execs_path) as stream:
        events = [
            line.rstrip("\n").split(" ", 3)
            for line in stream
            if line.startswith(("exec ", "exit "))
        ]
    paths = dict(spec.split("=", 1) for spec in (upstream_path, scrun_path))
    rows: dict[str, dict[str, list[float]]] = {}
    codes: dict[str, dict[str, int]] = {}
    hung: dict[str, int] = {}
    without_job: dict[str, int] = {}
    with open(runs_path) as stream:
        for line in stream:
            runtime, begin_s, end_s, code, start, stop = line.split()
            begin, end = float(begin_s), float(end_s)
            row = rows.setdefault(runtime, {})
            hung.setdefault(runtime, 0)
            without_job.setdefault(runtime, 0)
            if end - begin >= float(limit):  # timeout ended it: it took the whole limit
                hung[runtime] += 1
                continue
            row.setdefault("whole", []).append(end - begin)
            counted = codes.setdefault(runtime, {})
            counted[code] = counted.get(code, 0) + 1
            if runtime == "crun":
                continue
            jobs = grants(ctld_log, int(start), int(stop))
            if len(jobs) != 1 or jobs[0][0] not in launch:
                without_job[runtime] += 1
                continue
            job, granted = jobs[0]
            row.setdefault("grant-launch", []).append(launch[job] - granted)
            if job in stepd:
                row.setdefault("grant-stepd", []).append(stepd[job] - granted)
            marks = runtime_marks(events, begin, end, paths[runtime])
            marks["launch"], marks["stepd"] = launch[job], stepd.get(job)
            for name, when in marks.items():
                if when is not None:
                    row.setdefault(name, []).append(when - granted)
            srun = marks["srun"]
            if srun is not None:
                row.setdefault("srun→launch", []).append(launch[job] - srun)

    names = {
        "crun": "podman + crun",
        "upstream": "podman + upstream scrun",
        "scrun": "podman + our scrun",
    }
    print("\nmedian (min–max, IQR) in ms; ours/upstream: the medians' ratio")
    print(
        "\n| runtime | whole `podman run --rm … true` | grant → launch request on the node "
        "| grant → step's slurmstepd | exit codes | hung | runs without a job |"
    )
    print("|---|---|---|---|---|---|---|")
    for runtime, row in rows.items():
        seen = ", ".join(f"{c}×{n}" for c, n in sorted(codes.get(runtime, {}).items())) or "none"
        total = len(row.get("whole", [])) + hung[runtime]
        print(
            f"| {names.get(runtime, runtime)} | {spread(row.get('whole', []))} "
            f"| {spread(row.get('grant-launch', []))} | {spread(row.get('grant-stepd', []))} "
            f"| {seen} | {hung[runtime]}/{total} | {without_job[runtime]} |"
        )
    for key, label in (
        ("whole", "whole run"),
        ("grant-launch", "grant → launch"),
        ("grant-stepd", "grant → slurmstepd"),
    ):
        ours, theirs = (
            median(rows.get("scrun", {}).get(key, [])),
            median(rows.get("upstream", {}).get(key, [])),
        )
        if ours and theirs:
            print(
                f"ours/upstream, {label}: {ours / theirs:.2f}× ({(ours - theirs) * 1000:+.0f} ms)"
            )
    if any("srun" in row for row in rows.values()):
        print(
            "\nwhen each thing happened, in ms after the grant"
            " (median, min–max; negative: before it)"
        )
        print("\n| runtime | " + " | ".join(MARKS.values()) + " |")
        print("|---|" + "---|" * len(MARKS))
        for runtime in ("upstream", "scrun"):
            row = rows.get(runtime, {})
            print(
                f"| {names[runtime]} | "
                + " | ".join(spread(row.get(m, []), iqr=False) for m in MARKS)
                + " |"
            )
        print(
            "\n| runtime | grant → srun starts (the runtime's part)"
            " | srun starts → launch request (Slurm's) |"
        )
        print("|---|---|---|")
        for runtime in ("upstream", "scrun"):
            row = rows.get(runtime, {})
            ours_part, slurm_part = spread(row.get("srun", [])), spread(row.get("srun→launch", []))
            print(f"| {names[runtime]} | {ours_part} | {slurm_part} |")


if __name__ == "__main__":
    main()
