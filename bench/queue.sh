#!/usr/bin/env bash
# bench/queue.sh -- containers whose job waits in the queue (make bench step 8):
#   1. 20 containers started with `podman run -d` while their jobs wait (a dependency on a
#      held job): how long each `podman run -d` takes, and what the 20 anchors cost while
#      they wait 60 s: CPU seconds (utime+stime, /proc/<pid>/stat) and resident memory, with
#      their sallocs';
#   2. from the grant to the container's start: the anchor's stage-in and launch phases
#      (state.json) of a container granted after waiting, beside one granted at once.
# Ends by checking that nothing was left behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
COUNT="${BENCH_QUEUED:-20}"
WAIT="${BENCH_QUEUE_SECONDS:-60}"
out="$(mktemp -d)"
held=""
trap 'podman rm -f -t 0 $(cat "$out"/name.* 2>/dev/null) >/dev/null 2>&1 || true; [ -z "$held" ] || scancel "$held"; rm -rf "$out"' EXIT
ticks="$(getconf CLK_TCK)"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
spool() { echo "/run/user/$(id -u)/scrun/$1"; }

held="$(sbatch --parsable --hold -o /dev/null --wrap true)"
start_ns="$(date +%s%N)"
for i in $(seq "$COUNT"); do
  echo "queued-$i" >"$out/name.queued-$i"
  podman --runtime scrun run -d --name "queued-$i" -e "SCRUN_DEPENDENCY=afterok:$held" \
    localhost/busybox true >/dev/null
done
echo "$COUNT x podman run -d of a queued job: $(( ($(date +%s%N) - start_ns) / COUNT / 1000000 )) ms each (sequential)"
anchors=() sallocs=()
for i in $(seq "$COUNT"); do
  anchor="$(podman inspect -f '{{.State.Pid}}' "queued-$i")"
  anchors+=("$anchor")
  sallocs+=("$(pgrep -P "$anchor" -x salloc)")
done
before=0; for p in "${anchors[@]}"; do before=$((before + $(cpu_ticks "$p"))); done
sleep "$WAIT"
after=0; for p in "${anchors[@]}"; do after=$((after + $(cpu_ticks "$p"))); done
rss=0; for p in "${anchors[@]}"; do rss=$((rss + $(rss_kb "$p"))); done
srss=0; for p in "${sallocs[@]}"; do srss=$((srss + $(rss_kb "$p"))); done
awk -v t=$((after - before)) -v hz="$ticks" -v n="$COUNT" -v w="$WAIT" -v a="$rss" -v s="$srss" 'BEGIN {
  printf "%d anchors waiting %d s: %.2f CPU s in all (%.3f %% of one core); RSS %.1f MB per anchor, %.1f MB per salloc\n",
    n, w, t / hz, 100 * t / hz / w, a / n / 1024, s / n / 1024 }'
names=(); for i in $(seq "$COUNT"); do names+=("queued-$i"); done
podman rm -f -t 0 "${names[@]}" >/dev/null
rm -f "$out"/name.*

# grant -> start: one container that waited, one granted at once (no --rm: its state.json
# stays until podman rm)
phases() { python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["phases"]; print("stage-in %.0f ms, launch %.0f ms" % (1000*p.get("stage-in",0), 1000*p.get("launch",0)))' "$(spool "$1")/state.json"; }
for kind in waited at-once; do
  echo "$kind" >"$out/name.$kind"
  dep=()
  if [ "$kind" = waited ]; then
    held2="$(sbatch --parsable --hold -o /dev/null --wrap true)"; dep=(-e "SCRUN_DEPENDENCY=afterok:$held2")
  fi
  id="$(podman --runtime scrun run -d --name "$kind" "${dep[@]}" localhost/busybox sleep 5)"
  if [ "$kind" = waited ]; then sleep 3; scontrol release "$held2"; fi
  for _ in $(seq 100); do [ "$(podman inspect -f '{{.State.Status}}' "$kind")" = running ] && grep -q '"step_pid": [0-9]' "$(spool "$id")/state.json" && break; sleep 0.2; done
  echo "grant -> start, $kind: $(phases "$id")"
  podman rm -f -t 0 "$kind" >/dev/null
  [ "$kind" != waited ] || scancel "$held2"
done
scancel "$held"; held=""
nothing_left
