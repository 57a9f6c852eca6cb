#!/usr/bin/env bash
# bench/overhead.sh -- what scrun adds on the paths podman waits for, each as a ratio or a
# difference measured in this run:
#   `scrun state` against the bare interpreter's start       (target: <= 1.5x)
#   `scrun create` from exec to exit, minus the Slurm commands run meanwhile
#                                                              (target: <= 30 ms)
# The create figure: podman runs scrun through a wrapper that times `scrun create` from
# outside (bash's $EPOCHREALTIME: no process of its own) and keeps the create's phases from
# state.json; "the Slurm commands" are its allocate phase (salloc and scontrol, as the
# anchor times them). An strace of the same runs (-f, even with --seccomp-bpf) doubled the
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
done
python3 - "$out" <<'PY'
import json, statistics, sys

runs = []
for line in open(f"{sys.argv[1]}/create.log"):
    start, end, state = line.split(" ", 2)
    runs.append((float(end) - float(start), json.loads(state)["phases"]["allocate"]))
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
