#!/usr/bin/env bash
# bench/grant.sh -- the time from the job's grant to its running step, and the whole
# `podman run --rm localhost/busybox true`, for this project's scrun and Slurm's own (the C
# one, lib.sh upstream_runtime), measured the same way for both, from outside the runtimes:
#   grant   slurmctld's log line that gives the job its nodes (`_slurm_rpc_allocate_resources
#           JobId=J NodeList=n1`, or `sched: Allocate JobId=J` for a job that waited);
#   launch  the node's slurmd log line `launch task StepId=J.S request`: the step's launch
#           has reached the node (what follows is Slurm's and crun's, the same for both);
#   stepd   the step's slurmstepd logging its step cgroup (`[J.S] task/cgroup: ... step:`).
# Slurm's logs carry milliseconds (LogTimeFormat's default, iso8601_ms); slurmctld and the
# nodes' slurmd run on this host, one clock. Each run's job is the one whose grant appears in
# slurmctld's log while that run lasts.
# BENCH_RUNS runs (default 20) of each runtime, one of each in turn, the order rotating every
# round (upstream, scrun, crun; then scrun, crun, upstream; ...), after one unmeasured run of
# each; crun is the reference for the whole run (it has no job).
# Where the time between grant and launch goes: bench/execs.py (the kernel's process events,
# nothing traced or slowed) records when each runtime command (create, start) began and
# ended and when the step's srun began; BENCH_GRANT_TRACE=0 leaves it out. BENCH_GRANT_KEEP=DIR
# keeps the runs' lines and that record in DIR.
# Needs the cluster's exports (make bench loads them), root, and Slurm >= 26.05 (lib.sh
# upstream_runtime); nothing else may use the cluster while it runs (one job a run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"  # the cluster's environment, without the harness's SCRUN_*
LIMIT="${BENCH_TIMEOUT:-5}"
IMAGE=localhost/busybox
upstream_bench

runtimes=(crun upstream scrun)
# every program start and end on the machine, from the kernel (execs.py), unless
# BENCH_GRANT_TRACE=0
if [ "${BENCH_GRANT_TRACE:-1}" = 1 ]; then
  python3 "$BENCH_DIR/execs.py" "$B/execs" &
  BENCH_PIDS="$!"
fi
# the logs, from this cluster's slurm.conf (the nodes' pattern with %n)
conf() { sed -n "s|^$1=||p" "$SLURM_CONF"; }
ctld_log="$(conf SlurmctldLogFile)"
node_logs="$(conf SlurmdLogFile | sed 's|%n|*|')"
[ -r "$ctld_log" ] || { echo "no slurmctld log (SlurmctldLogFile) to read" >&2; exit 1; }

echo "== $(srun --version), $(podman --version), $(crun --version | head -1), upstream $UPSTREAM;" \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # run RUNTIME [MEASURED]: one podman run; measured: a line in $B/runs
  local runtime="$1" from to begin end rc=0
  from="$(stat -c %s "$ctld_log")"
  begin="$EPOCHREALTIME"
  timeout -k 1 "$LIMIT" podman --runtime "$runtime" run --rm --label scrun-bench "$IMAGE" true \
    >/dev/null 2>>"$B/stderr" || rc=$?
  end="$EPOCHREALTIME"
  to="$(stat -c %s "$ctld_log")"
  "$B/reap"
  [ -n "${2:-}" ] || return 0
  echo "$runtime $begin $end $rc $from $to" >>"$B/runs"
}
for runtime in "${runtimes[@]}"; do run "$runtime"; done  # not measured: caches, images
for i in $(seq "$RUNS"); do
  n="${#runtimes[@]}"
  for j in $(seq 0 $((n - 1))); do run "${runtimes[$(((i + j) % n))]}" measured; done
done
echo "== after the runs: load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$BENCH_PIDS" ]; then
  kill "$BENCH_PIDS" 2>/dev/null || echo "== no trace of the runtimes' commands (execs.py ended)"
  BENCH_PIDS=""
fi
touch "$B/execs"
ours="$(sed -n 's|^scrun = \["\(.*\)"\]$|\1|p' "$CONTAINERS_CONF")"
# shellcheck disable=SC2086  # node_logs is a glob
python3 "$BENCH_DIR/grant.py" "$B/runs" "$B/execs" "$LIMIT" "upstream=$B" \
  "scrun=$ours" "$ctld_log" $node_logs
if [ -n "${BENCH_GRANT_KEEP:-}" ]; then  # the runs and the record of programs, to read
  mkdir -p "$BENCH_GRANT_KEEP"
  cp "$B/runs" "$B/execs" "$B/stderr" "$BENCH_GRANT_KEEP/" 2>/dev/null || true
fi
if [ -s "$B/stderr" ]; then
  echo "== podman's stderr (first lines):"
  head -5 "$B/stderr"
fi
