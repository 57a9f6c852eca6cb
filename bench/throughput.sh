#!/usr/bin/env bash
# bench/throughput.sh -- 1 GiB of a container's stdout through `podman run` with scrun,
# against the same container run by `srun --chdir=/ --container` directly (the Slurm part alone).
# scrun hands the step its own stdout, so the ratio shows what podman and conmon add.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUNS="${BENCH_THROUGHPUT_RUNS:-2}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
gib='head -c 1073741824 /dev/zero'

podman --runtime scrun run --rm localhost/busybox sh -c "$gib" | wc -c | grep -qx 1073741824
srun --chdir=/ --container "$BENCH_BUNDLE" sh -c "$gib" | wc -c | grep -qx 1073741824
hyperfine -N -r "$RUNS" --export-json "$out/gib.json" \
  "bash -c 'podman --runtime scrun run --rm localhost/busybox sh -c \"$gib\" >/dev/null'" \
  "bash -c 'srun --chdir=/ --container $BENCH_BUNDLE sh -c \"$gib\" >/dev/null'" | grep -E "Benchmark|Time"
python3 - "$out/gib.json" <<'PY'
import json, statistics, sys
scrun, srun = (statistics.median(r["times"]) for r in json.load(open(sys.argv[1]))["results"])
print(f"1 GiB of stdout: scrun {1024 / scrun:.0f} MiB/s, srun directly {1024 / srun:.0f} MiB/s: "
      f"throughput ratio {srun / scrun:.2f} (1 = as fast as srun)")
PY
