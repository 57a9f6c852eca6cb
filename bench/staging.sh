#!/usr/bin/env bash
# bench/staging.sh -- what a staging scrun.lua costs, and one version of it against another:
# `podman run --rm localhost/busybox true`, and the same writing to a bind mount the nodes
# cannot see (-v DIR:/out), through crun and through scrun with each scrun.lua given, in one
# run (interleaved rounds). Each script gets the cluster's scratch dir (its `local scratch`
# line) and a site of its own (the cluster's configs; a wrapper hands scrun its site file).
# Usage: bash bench/staging.sh SCRIPT.lua...   e.g. the shipped script before and after a
# change: bash bench/staging.sh <(git show main:docs/scrun-lua/shared-scratch.lua) \
#           docs/scrun-lua/shared-scratch.lua
# Needs the cluster's exports.
set -euo pipefail
. "$(dirname "$0")/lib.sh"  # the cluster's environment, without the harness's SCRUN_*
[ "$#" -gt 0 ] || { echo "usage: bash bench/staging.sh SCRIPT.lua..." >&2; exit 2; }
out="$(mktemp -d)"
data="$(mktemp -d /var/tmp/scrun-bench-data.XXXXXX)"   # not below what the nodes see
trap 'rm -rf "$out" "$data"' EXIT
etc="$(dirname "$SLURM_CONF")"
scratch_line="$(grep '^local scratch = ' "$etc/scrun.lua")"

commands=(
  "podman --runtime crun run --rm localhost/busybox true"
  "podman --runtime crun run --rm -v $data:/out localhost/busybox sh -c 'echo x >/out/f'"
)
n=0
for script in "$@"; do
  n=$((n + 1))
  site="$out/site$n"
  make_site "$site"
  sed "s|^local scratch = .*|$scratch_line|" "$script" >"$site/etc/scrun.lua"
  grep -qx "$scratch_line" "$site/etc/scrun.lua" || { echo "$script: no scratch line" >&2; exit 1; }
  echo "script $n: $script"
  podman="env CONTAINERS_CONF=$site/containers.conf podman --runtime scrun"
  commands+=("$podman run --rm localhost/busybox true"
    "$podman run --rm -v $data:/out localhost/busybox sh -c 'echo x >/out/f'")
done

rounds "$out/staging.json" -w 1 -- "${commands[@]}"

python3 - "$out/staging.json" <<'PY'
import json, statistics, sys
results = json.load(open(sys.argv[1]))["results"]
def figures(result):
    times = sorted(t * 1000 for t in result["times"])
    q1, _, q3 = statistics.quantiles(times, n=4)
    return statistics.median(times), q1, q3
crun = [figures(r)[0] for r in results[:2]]
for i in range(2, len(results), 2):
    print(f"script {i // 2}:")
    for result, base, what in zip(results[i:i + 2], crun, ("true", "-v DIR:/out, written")):
        median, q1, q3 = figures(result)
        print(f"  {what}: {median:.0f} ms (IQR {q1:.0f}-{q3:.0f}), crun {base:.0f} ms: "
              f"{median / base:.2f}x, +{median - base:.0f} ms")
PY
nothing_left
