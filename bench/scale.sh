#!/usr/bin/env bash
# bench/scale.sh -- N containers at once from one user on a cluster with room for 16
# (issue 29), for each N given (default: 100 500):
#   1. `podman run -d … sleep` of all N, BENCH_SCALE_PARALLEL (8) podman at a time: starts
#      per second (until the last `podman run -d` returned); fewer when the machine's memory
#      runs short (MemAvailable under BENCH_SCALE_RESERVE_MB, 3072): it says how many ran;
#      a start that fails is counted and said, and the rest are measured;
#   2. `podman ps` and `scrun list` against what was started (running, queued with a reason);
#   3. the login node's memory per container: RSS and PSS (smaps_rollup) of each anchor and
#      its processes (salloc and its job holder; srun for a running one), by process name,
#      for the running containers and the queued ones;
#   4. slurmctld's RPCs a minute by message type (`sdiag --reset`, BENCH_SCALE_SDIAG_SECONDS
#      (60) of nothing but the containers waiting, `sdiag`) while N-16 are queued;
#   5. the time `podman rm -f` of all takes (target <= 30 s), and what was left behind
#      (containers podman still lists, spool directories, processes, jobs).
# BENCH_SCALE_RUNTIME=crun: the same containers through crun (1., 3. and 5.), the reference;
# BENCH_SCALE_RUNTIME=upstream: through Slurm's own scrun (lib.sh upstream_runtime), which
# blocks in `create` until the job is granted: at most 16, all running.
# Needs the cluster's exports (make bench loads them) and root (sdiag --reset, others' PSS).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
PARALLEL="${BENCH_SCALE_PARALLEL:-8}"
RESERVE_MB="${BENCH_SCALE_RESERVE_MB:-3072}"
SDIAG_SECONDS="${BENCH_SCALE_SDIAG_SECONDS:-60}"
RUNTIME="${BENCH_SCALE_RUNTIME:-scrun}"
# podman rm -f waits this long for SIGTERM to end a container before SIGKILL: a `sleep`
# as the container's PID 1 ignores SIGTERM, through crun as through scrun (podman's
# default, 10 s, then takes 10 s a container, a few containers at a time)
STOP_SECONDS="${BENCH_SCALE_STOP_SECONDS:-0}"
out="$(mktemp -d)"
UPSTREAM_LINKED=""
# at exit: what a run left goes (upstream's stuck anchors first: write_reap), while the
# runtime "upstream" still exists; then the jobs of upstream's failed creates, which its
# killed anchors leave (only jobs that were not there before)
squeue -h -u "$(id -u)" -o %i | sort >"$out/jobs-before"
trap '[ ! -x "$out/reap" ] || { "$out/reap"
    squeue -h -u "$(id -u)" -o %i | sort | comm -23 - "$out/jobs-before" | xargs -r scancel; }
  podman rm -f -t 0 $(cat "$out"/started 2>/dev/null) >/dev/null 2>&1 || true
  [ -z "$UPSTREAM_LINKED" ] || rm -f "$UPSTREAM_LINKED"; rm -rf "$out"' EXIT
if [ "$RUNTIME" = upstream ]; then
  [ -x "$UPSTREAM" ] || { echo "== no $UPSTREAM: no upstream scrun to measure"; exit 0; }
  available=0
  upstream_runtime "$out/upstream" || available=$?
  case "$available" in 0) ;; 1) exit 0 ;; *) exit 1 ;; esac
  write_reap "$out/reap" scrun-scale
fi

available_mb() { awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo; }
# how many of this bench's containers podman lists in state $1
podman_count() { podman ps -a --filter "label=scrun-scale" --filter "status=$1" -q | wc -l; }

scale() {
  local count="$1" i start end tried=0 started names=() pids=() not_ran
  if [ "$RUNTIME" = upstream ] && [ "$count" -gt 16 ]; then
    echo "== upstream scrun waits in create for the grant: N = 16, not $count"
    count=16
  fi
  # a container an earlier run could not remove (podman's rm -f failed) would take a name
  # and be counted: removed first
  mapfile -t leftover < <(podman ps -a --filter "label=scrun-scale" -q)
  if [ "${#leftover[@]}" -gt 0 ]; then
    echo "   removing ${#leftover[@]} container(s) an earlier run left"
    podman rm -f -t 0 "${leftover[@]}" >/dev/null || true
  fi
  : >"$out/started"
  : >"$out/ran"
  echo "== N = $count ($RUNTIME; $(srun --version); $(podman --version); $(nproc) cores," \
    "$(available_mb) MB available)"
  start="$(date +%s.%N)"
  for i in $(seq "$count"); do
    if [ "$(available_mb)" -lt "$RESERVE_MB" ]; then
      echo "   memory short ($(available_mb) MB available): $tried of $count started"
      break
    fi
    echo "scale-$i" >>"$out/started"
    # a start that fails is counted, and the run goes on with those that ran
    { podman --runtime "$RUNTIME" run -d --name "scale-$i" --label scrun-scale \
      localhost/busybox sleep 3600 >/dev/null && echo "scale-$i" >>"$out/ran"; } &
    pids+=("$!")
    tried=$((tried + 1))
    if [ "${#pids[@]}" -ge "$PARALLEL" ]; then wait_all "${pids[@]}" || true; pids=(); fi
  done
  wait_all "${pids[@]}" || true
  end="$(date +%s.%N)"
  mapfile -t names <"$out/ran"
  mapfile -t not_ran < <(sort "$out/started" | comm -23 - <(sort "$out/ran"))
  started="${#names[@]}"
  if [ "${#not_ran[@]}" -gt 0 ]; then  # out of the figures' way (a stuck one: the exit's reap)
    timeout -k 5 60 podman rm -f -t 0 "${not_ran[@]}" >/dev/null 2>&1 || true
  fi
  awk -v n="$started" -v f="${#not_ran[@]}" -v s="$start" -v e="$end" \
    'BEGIN {printf "1. %d started in %.1f s: %.2f starts per second%s\n", n, e - s, n / (e - s),
            f ? sprintf(" (%d more failed to start)", f) : ""}'

  if [ "$RUNTIME" = crun ]; then  # the reference: no Slurm, no queue
    memory_and_removal "$count" "${names[@]}"
    return
  fi
  # the queue settles: 16 granted (their steps running), the rest pending
  local running pending
  for _ in $(seq 300); do
    running="$(squeue -h -t R -o %i | wc -l)"
    pending="$(squeue -h -t PD -o %i | wc -l)"
    [ $((running + pending)) -eq "$started" ] && [ "$running" -ge $((started < 16 ? started : 16)) ] && break
    sleep 1
  done
  echo "   Slurm: $running running, $pending pending"

  echo "4. slurmctld RPCs while $pending are queued ($SDIAG_SECONDS s, per minute):"
  sdiag --reset >/dev/null
  sleep "$SDIAG_SECONDS"
  sdiag >"$out/sdiag"
  awk -v secs="$SDIAG_SECONDS" '
    /^Remote Procedure Call statistics by message type/ {on = 1; next}
    /^Remote Procedure Call statistics by user/ {on = 0}
    on && /count:/ {
      split($0, parts, "count:"); split(parts[2], n, " ")
      printf "   %-32s %6.1f a minute\n", $1, n[1] * 60 / secs; total += n[1]
    }
    END {printf "   %-32s %6.1f a minute\n", "all", total * 60 / secs}' "$out/sdiag"

  echo "2. what podman and scrun list say:"
  echo "   podman ps: $(podman_count running) running, $(podman_count created) created, $(podman_count exited) exited"
  # queued containers show (Reason) where the nodes go
  scrun list >"$out/list"
  echo "   scrun list: $(tail -n +2 "$out/list" | wc -l) containers," \
    "$(grep -c '(' "$out/list" || true) with a queue reason" \
    "($(grep -o '([A-Za-z]*)' "$out/list" | sort | uniq -c | tr -s ' ' | tr '\n' ',' || true))"

  memory_and_removal "$started" "${names[@]}"
}

# 3. and 5. for the N containers named after N
memory_and_removal() {
  local started="$1" name start end
  shift
  local names=("$@")
  echo "3. login-node memory per container (the anchor and its processes; crun: conmon's child):"
  local anchors=()
  for name in "${names[@]}"; do anchors+=("$(podman inspect -f '{{.State.Pid}}' "$name")"); done
  python3 - "${anchors[@]}" <<'PY'
import os, statistics, sys

def read(path):
    try:
        with open(path) as stream:
            return stream.read()
    except OSError:
        return ""

children = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        stat = read(f"/proc/{entry}/stat")
        if stat:
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))

def tree(pid):
    found = [pid]
    for child in children.get(pid, []):
        found += tree(child)
    return found

def kb(text, key):
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0

groups = {"running": [], "queued": []}
for anchor in map(int, sys.argv[1:]):
    procs = []
    for pid in tree(anchor):
        # (upstream's anchor is "scrun:<id>")
        name = read(f"/proc/{pid}/comm").strip().split(":")[0]
        procs.append((name, kb(read(f"/proc/{pid}/status"), "VmRSS"),
                      kb(read(f"/proc/{pid}/smaps_rollup"), "Pss")))
    kind = "queued" if any(name == "salloc" for name, _, _ in procs) and not any(
        name == "srun" for name, _, _ in procs) else "running"
    groups[kind].append(procs)

mb = lambda k: k / 1024
for kind, containers in groups.items():
    if not containers:
        continue
    rss = [sum(r for _, r, _ in c) for c in containers]
    pss = [sum(p for _, _, p in c) for c in containers]
    print(f"   {kind} ({len(containers)}): RSS median {mb(statistics.median(rss)):.1f} MB"
          f" ({mb(min(rss)):.1f}-{mb(max(rss)):.1f}), PSS median {mb(statistics.median(pss)):.1f} MB"
          f" ({mb(min(pss)):.1f}-{mb(max(pss)):.1f})")
    by_name = {}
    for c in containers:
        for index, (name, r, p) in enumerate(c):
            by_name.setdefault(f"{name}", []).append((r, p))
    for name, values in by_name.items():
        per = len(values) / len(containers)
        print(f"      {name:10} x{per:.0f}  RSS {mb(statistics.median(r for r, _ in values)):5.1f} MB"
              f"  PSS {mb(statistics.median(p for _, p in values)):5.1f} MB (median of each)")
PY

  start="$(date +%s.%N)"
  local removed=0
  timeout -k 5 600 podman rm -f -t "$STOP_SECONDS" "${names[@]}" >/dev/null 2>"$out/rm.err" || removed=$?
  end="$(date +%s.%N)"
  awk -v n="$started" -v s="$start" -v e="$end" \
    -v t="$STOP_SECONDS" 'BEGIN {printf "5. podman rm -f -t %s of all %d: %.1f s\n", t, n, e - s}'
  if [ "$removed" != 0 ]; then
    echo "   podman rm failed (exit $removed), $(grep -c . "$out/rm.err") lines:"
    { grep -i error "$out/rm.err" || cat "$out/rm.err"; } | sed 's/^/     /' | head -5
    podman rm -f -t 0 "${names[@]}" >/dev/null 2>&1 || true
  fi
  : >"$out/started"
  local kept
  kept="$(podman ps -a --filter "label=scrun-scale" -q | wc -l)"
  [ "$kept" = 0 ] || echo "   left: $kept containers podman still lists (not removed)"
  echo "   $(nothing_left || true)"
}

counts=("$@")
[ "$#" -gt 0 ] || counts=(100 500)
for count in "${counts[@]}"; do scale "$count"; done
