#!/usr/bin/env bash
# bench/run.sh -- the speed and memory figures of bench/README.md (a benchmark, not a test).
# Needs the private cluster's exports (make bench loads them). Runs, side by side:
#   1. `scrun state` on a running container                    (target: 1.5x `python -c pass`)
#   2. `podman run --rm localhost/busybox true` through scrun, through crun (target: 2x),
#      and `srun --chdir=/ --container <bundle> true` directly
#   3. the anchor's resident memory while its container runs   (target: <= 15 MB)
#   2b. bench/layouts.sh: the same with podman's storage on the shared dir, no scrun.lua
#   4-8. bench/rss.sh, concurrent.sh, throughput.sh, overhead.sh, queue.sh (see each)
set -euo pipefail
. "$(dirname "$0")/lib.sh"  # the cluster's environment, without the harness's SCRUN_*
out="$(mktemp -d)"
trap 'podman rm -f -t 0 scrun-bench >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

echo "== machine: $(nproc) cores, $(uname -r); $(srun --version); $(podman --version)"

podman rm -f -t 0 scrun-bench >/dev/null 2>&1 || true
podman --runtime scrun run -d --name scrun-bench localhost/busybox sleep 600 >/dev/null
id="$(podman inspect -f '{{.ID}}' scrun-bench)"
pid="$(podman inspect -f '{{.State.Pid}}' scrun-bench)"

echo "== 1. scrun state on a running container"
hyperfine -N -w 5 -r "$((RUNS * 5))" --export-json "$out/state.json" "scrun state $id" | grep -E "Time|Range"

echo "== 3. anchor memory (pid $pid)"
grep -E "VmRSS|VmHWM" "/proc/$pid/status"
podman rm -f -t 0 scrun-bench >/dev/null

echo "== 2. a whole container run, side by side"
rounds "$out/run.json" -w 1 -- \
  "podman --runtime scrun run --rm localhost/busybox true" \
  "podman --runtime crun run --rm localhost/busybox true" \
  "srun --chdir=/ --container $BENCH_BUNDLE true"

python3 - "$out" <<'PY'
import json, statistics, sys
def table(path):
    for result in json.load(open(path))["results"]:
        times = sorted(result["times"])
        q1, _, q3 = statistics.quantiles(times, n=4)
        print(f"| `{result['command']}` | {statistics.median(times)*1000:.1f} ms | "
              f"{(q3-q1)*1000:.1f} ms | {times[0]*1000:.1f}–{times[-1]*1000:.1f} ms |")
print("\n| command | median | IQR | range |\n|---|---|---|---|")
table(f"{sys.argv[1]}/state.json")
table(f"{sys.argv[1]}/run.json")
scrun, crun = (statistics.median(r["times"])
               for r in json.load(open(f"{sys.argv[1]}/run.json"))["results"][:2])
print(f"\npodman run, scrun ÷ crun (medians): {scrun * 1000:.0f} ÷ {crun * 1000:.0f} ms "
      f"= {scrun / crun:.2f}x (target: <= 2.0x)")
PY

here="$(dirname "$0")"
echo "== 2b. staged (scrun.lua) against podman storage the nodes share (no scrun.lua)"
bash "$here/layouts.sh"
echo "== 4. the anchor's memory, flat over 50 sequential and 16 concurrent runs"
bash "$here/rss.sh"
echo "== 5. 16 runs at once against one run"
bash "$here/concurrent.sh"
echo "== 6. 1 GiB of stdout through scrun against srun directly"
bash "$here/throughput.sh"
echo "== 7. what scrun adds to state and create"
bash "$here/overhead.sh"
echo "== 8. containers whose job waits in the queue"
bash "$here/queue.sh"
