#!/usr/bin/env bash
# bench/overhead.sh -- what scrun adds on the paths podman waits for, each as a ratio or a
# difference measured in this run:
#   `scrun state` against the bare interpreter's start       (target: <= 1.5x)
#   `scrun create` from exec to exit, minus the Slurm commands run meanwhile
#                                                              (target: <= 30 ms)
# The create figure comes from an execve/exit trace of whole `podman run`s
# (strace --seccomp-bpf: only those two syscalls stop the traced processes).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUNS="${BENCH_RUNS:-20}"
out="$(mktemp -d)"
trap 'podman rm -f -t 0 scrun-bench-state >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

podman rm -f -t 0 scrun-bench-state >/dev/null 2>&1 || true
podman --runtime scrun run -d --name scrun-bench-state localhost/busybox sleep 600 >/dev/null
id="$(podman inspect -f '{{.ID}}' scrun-bench-state)"
hyperfine -N -w 5 -r "$((RUNS * 5))" --export-json "$out/state.json" \
  "scrun state $id" "$VENV_BIN/python3 -c pass" | grep -E "Benchmark|Time"
podman rm -f -t 0 scrun-bench-state >/dev/null

for i in $(seq "$((RUNS / 4 + 1))"); do
  strace -f -q --seccomp-bpf -tt -e trace=execve,exit_group -o "$out/trace.$i" \
    podman --runtime scrun run --rm localhost/busybox true
done
python3 - "$out" <<'PY'
import glob, json, re, statistics, sys
from datetime import datetime

def seconds(stamp):
    return (datetime.strptime(stamp, "%H:%M:%S.%f") - datetime(1900, 1, 1)).total_seconds()

def create_overhead(path):
    """(create's exec→exit, the Slurm commands' time within it), in seconds."""
    started, ended, slurm, create = {}, {}, [], None
    for line in open(path):
        match = re.match(r"(\d+) +(\S+) (.*)", line)
        if not match:
            continue
        pid, at, call = int(match[1]), seconds(match[2]), match[3]
        if call.startswith("execve(") and "= -1" not in call:  # "= 0" or "<unfinished ...>"
            started.setdefault(pid, at)
            if re.search(r'\["[^"]*scrun", .*"create"', call):
                create = pid
            if re.match(r'execve\("[^"]*/(salloc|scontrol|scancel|squeue|srun)"', call):
                slurm.append(pid)
        elif call.startswith(("+++ exited", "+++ killed")):
            ended.setdefault(pid, at)
    begin, end = started[create], ended[create]
    busy = [(started[p], min(ended.get(p, end), end)) for p in slurm if begin <= started[p] < end]
    return end - begin, sum(stop - start for start, stop in busy)

runs = [create_overhead(path) for path in sorted(glob.glob(f"{sys.argv[1]}/trace.*"))]
create = statistics.median(c for c, _ in runs)
slurm = statistics.median(s for _, s in runs)
extra = statistics.median(c - s for c, s in runs)
print(f"scrun create, exec to exit: {create * 1000:.0f} ms, of which Slurm commands "
      f"{slurm * 1000:.0f} ms: scrun adds {extra * 1000:.0f} ms (median of {len(runs)})")
state, bare = (statistics.median(r["times"])
               for r in json.load(open(f"{sys.argv[1]}/state.json"))["results"])
print(f"scrun state {state * 1000:.1f} ms, bare interpreter {bare * 1000:.1f} ms: "
      f"{state / bare:.2f}x")
PY
