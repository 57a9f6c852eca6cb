#!/usr/bin/env bash
# bench/overhead.sh -- what scrun adds on the paths podman waits for, each as a ratio or a
# difference measured in this run:
#   `scrun state` against the bare interpreter's start       (target: <= 1.5x)
#   `scrun create` from exec to exit, minus the Slurm command it waits for (salloc)
#                                                              (target: <= 30 ms)
# The create figure: podman runs scrun through a wrapper that times `scrun create` from
# outside (bash's $EPOCHREALTIME: no process of its own). salloc's share is taken two ways:
# the create's allocate phase (from its state.json; the anchor imports its serving modules
# meanwhile, so the phase is the longer of the two), and a bare salloc of the same job
# holder, timed after each podman run (the stricter figure when the imports are longer). An strace of the same runs (-f, even with --seccomp-bpf) doubled the
# figure: every fork of the traced processes stops for the tracer.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out="$(mktemp -d)"
trap 'podman rm -f -t 0 scrun-bench-state >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

podman rm -f -t 0 scrun-bench-state >/dev/null 2>&1 || true
podman --runtime scrun run -d --name scrun-bench-state localhost/busybox sleep 600 >/dev/null
id="$(podman inspect -f '{{.ID}}' scrun-bench-state)"
RUNS=$((RUNS * 5)) rounds "$out/state.json" -w 5 -- "scrun state $id" "$VENV_BIN/python3 -c pass"
podman rm -f -t 0 scrun-bench-state >/dev/null

cat >"$out/runtime" <<WRAPPER
#!/usr/bin/env bash
if [[ " \$* " == *" create "* ]]; then
  start=\$EPOCHREALTIME; $VENV_BIN/scrun "\$@"; code=\$?; end=\$EPOCHREALTIME
  echo "\$start \$end \$(cat "$SPOOL_ROOT/\${!#}/state.json")" >>"$out/create.log"
  exit "\$code"
fi
exec $VENV_BIN/scrun "\$@"
WRAPPER
chmod +x "$out/runtime"
for _ in $(seq "$RUNS"); do
  podman --runtime "$out/runtime" run --rm localhost/busybox true
  start=$EPOCHREALTIME
  # shellcheck disable=SC2016 # the job's shell expands it
  salloc -Q --wait-all-nodes=1 -- /bin/sh -c 'echo "$SLURM_JOB_ID"' >/dev/null
  echo "$start $EPOCHREALTIME" >>"$out/salloc.log"
done
python3 - "$out" <<'PY'
import json, statistics, sys

runs = []
for line in open(f"{sys.argv[1]}/create.log"):
    start, end, state = line.split(" ", 2)
    runs.append((float(end) - float(start), json.loads(state)["phases"]["allocate"]))
create = statistics.median(c for c, _ in runs)
phase = statistics.median(s for _, s in runs)
extra = statistics.median(c - s for c, s in runs)
salloc = statistics.median(
    float(end) - float(start)
    for start, end in (line.split() for line in open(f"{sys.argv[1]}/salloc.log"))
)
print(f"scrun create, exec to exit: {create * 1000:.0f} ms (median of {len(runs)}); "
      f"its allocate phase {phase * 1000:.0f} ms: scrun adds {extra * 1000:.0f} ms; "
      f"a bare salloc {salloc * 1000:.0f} ms: scrun adds {(create - salloc) * 1000:.0f} ms")
state, bare = (statistics.median(r["times"])
               for r in json.load(open(f"{sys.argv[1]}/state.json"))["results"])
print(f"scrun state {state * 1000:.1f} ms, bare interpreter {bare * 1000:.1f} ms: "
      f"{state / bare:.2f}x")
PY
