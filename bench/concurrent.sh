#!/usr/bin/env bash
# bench/concurrent.sh -- 16 `podman run --rm ... true` at once: wall time against one run,
# through scrun and through crun, and 16 `srun --container <bundle> true` at once (what
# Slurm itself takes for 16 jobs: scrun's ratio lies between that and crun's).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUNS="${BENCH_RUNS:-20}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The wall time (s) of `podman run --rm true` through runtime $1 (srun: `srun --container`
# alone), $2 of them at once.
wall() {
  local runtime="$1" count="$2" start end i
  start="$(date +%s.%N)"
  for i in $(seq "$count"); do
    if [ "$runtime" = srun ]; then
      srun --container "$SCRUN_TEST_BUNDLE" true &
    else
      podman --runtime "$runtime" run --rm --cidfile "$out/cid.$runtime.$count.$i.$RANDOM" \
        localhost/busybox true &
    fi
  done
  wait
  end="$(date +%s.%N)"
  echo "$end - $start" | bc
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for runtime in scrun crun srun; do
  one="$(for _ in $(seq "$((RUNS / 4 + 1))"); do wall "$runtime" 1; done | median)"
  many="$(for _ in $(seq 3); do wall "$runtime" 16; done | median)"
  printf '%s: one run %.0f ms, 16 at once %.0f ms: %.1fx one run\n' \
    "$runtime" "$(echo "$one * 1000" | bc)" "$(echo "$many * 1000" | bc)" "$(echo "$many / $one" | bc -l)"
done
nothing_left "$out"/cid.scrun.*
