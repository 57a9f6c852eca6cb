#!/usr/bin/env bash
# bench/upstream.sh -- podman + crun, podman + Slurm's own scrun (the C one Slurm >= 23.02
# installs as /usr/bin/scrun) and podman + this project's scrun, side by side in ONE
# run, each for `true` and `sh -c 'exit 3'`. Reports, per runtime and command: the median,
# the ratio to crun, ours/upstream, the exit codes seen and the runs that hung. The runs
# are made in interleaved rounds (lib.sh `rounds`).
#
# Every run is bounded: `timeout BENCH_TIMEOUT` (5 s) around podman. Upstream scrun 24.11.5
# through podman 5.4 sometimes never returns (its anchor spins after the job ended); such a
# run takes the whole limit (timeout ends it: exit 124, or 137 when podman ignores the TERM),
# counts as hung and is left out of the medians and exit codes. After every run,
# `reap` ends what a hung run left: the stuck upstream anchor of a bench container
# (SIGTERM, by pid) and the container (podman rm).
#
# Needs the cluster's exports (make bench loads them). Upstream's anchor starts srun without
# SLURM_CONF, so srun reads /etc/slurm/slurm.conf: the script links it to this cluster's
# slurm.conf when there is none (the Debian 13 root), and refuses to replace another one.
set -euo pipefail
. "$(dirname "$0")/lib.sh"  # the cluster's environment, without the harness's SCRUN_*
LIMIT="${BENCH_TIMEOUT:-5}"
IMAGE=localhost/busybox
upstream_bench

echo "== $(srun --version), $(podman --version), $(crun --version | head -1), upstream $UPSTREAM"
commands=()
for runtime in crun upstream scrun; do
  for cmd in "true" "sh -c 'exit 3'"; do
    commands+=("timeout -k 1 $LIMIT podman --runtime $runtime run --rm --label scrun-bench $IMAGE $cmd")
  done
done
started="$(date +%Y-%m-%dT%H:%M:%S)"
rounds "$B/run.json" -i -w 1 --conclude "$B/reap" -- "${commands[@]}"
# Jobs an upstream anchor left running: this user's, submitted during the bench, with a
# container id but not scrun's comment (every job of ours carries `scrun:<id>`).
"$B/reap"
while read -r job cid comment submitted; do
  case "$cid:$comment" in "(null):"* | *":scrun:"*) continue ;; esac
  [[ "$submitted" < "$started" ]] && continue
  echo "== job $job of container $cid still ran after the bench: scancel"
  scancel "$job"
done < <(squeue -h -u "$(id -un)" -O JobId:12,ContainerId:80,Comment:80,SubmitTime:24 2>/dev/null || true)

python3 - "$B/run.json" "$LIMIT" <<'PY'
import collections, json, re, statistics, sys

limit = float(sys.argv[2])
rows = {}
for result in json.load(open(sys.argv[1]))["results"]:
    command = result["command"]
    runtime = re.search(r"--runtime (\S+)", command).group(1)
    what = command.split(" localhost/busybox ", 1)[1]
    # a run that timeout had to end (124 after TERM, 137 after KILL) took the whole limit
    runs = list(zip(result["times"], result["exit_codes"]))
    done = [(t, c) for t, c in runs if t < limit]
    rows[(runtime, what)] = (
        statistics.median(t for t, _ in done) if done else None,
        collections.Counter(c for _, c in done),
        len(runs) - len(done),
        len(runs),
    )

def ms(x):
    return f"{x * 1000:.0f} ms" if x else "n/a"

def ratio(a, b, digits=1):
    return f"{a / b:.{digits}f}×" if a and b else "n/a"

names = {"crun": "podman + crun", "upstream": "podman + upstream scrun", "scrun": "podman + our scrun"}
print("\n| runtime | container | median | vs crun | ours/upstream | exit codes | hung |")
print("|---|---|---|---|---|---|---|")
for (runtime, what), (median, codes, hung, runs) in rows.items():
    crun = rows[("crun", what)][0]
    ours_up = ratio(median, rows[("upstream", what)][0], 2) if runtime == "scrun" else ""
    seen = ", ".join(f"{c}×{n}" for c, n in sorted(codes.items())) or "none"
    print(f"| {names[runtime]} | `{what}` | {ms(median)} | {ratio(median, crun)} | {ours_up} "
          f"| {seen} | {hung}/{runs} |")
PY
