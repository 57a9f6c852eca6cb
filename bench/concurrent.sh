#!/usr/bin/env bash
# bench/concurrent.sh -- 16 `podman run --rm ... true` at once: wall time against one run,
# through scrun and through crun, and 16 `srun --chdir=/ --container <bundle> true` at once (what
# Slurm itself takes for 16 jobs: scrun's ratio lies between that and crun's).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# The wall time (s) of `podman run --rm true` through runtime $1 (srun: `srun --chdir=/ --container`
# alone), $2 of them at once.
wall() {
  local runtime="$1" count="$2" start end pids=()
  start="$(date +%s.%N)"
  for _ in $(seq "$count"); do
    if [ "$runtime" = srun ]; then
      srun --chdir=/ --container "$BENCH_BUNDLE" true &
    else
      podman --runtime "$runtime" run --rm localhost/busybox true &
    fi
    pids+=("$!")
  done
  # (exit: this runs in a command substitution, where set -e does not apply)
  wait_all "${pids[@]}" || exit 1
  end="$(date +%s.%N)"
  awk -v s="$start" -v e="$end" 'BEGIN {print e - s}'
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for runtime in scrun crun srun; do
  one="$(for _ in $(seq "$((RUNS / 4 + 1))"); do wall "$runtime" 1; done | median)"
  many="$(for _ in $(seq 3); do wall "$runtime" 16; done | median)"
  awk -v r="$runtime" -v one="$one" -v many="$many" \
    'BEGIN {printf "%s: one run %.0f ms, 16 at once %.0f ms: %.1fx one run\n", r, one * 1000, many * 1000, many / one}'
done
nothing_left
