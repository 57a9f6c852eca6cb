#!/usr/bin/env bash
# bench/kill.sh -- `podman rm -f -t 0` of a running container (a `sleep` as its pid 1, which
# only SIGKILL ends), BENCH_KILL_RUNS (7) of each, interleaved:
#   scrun       the anchor's SIGKILL through the node's runtime (`<runtime> kill`, from the
#               site's exec_command: scrun_anchor/step_signals.py);
#   via-slurm   the same scrun with the same site file but its exec_command (a runtime of
#               podman's that runs scrun with SCRUN_SITE_CONFIG: podman 4 passes no
#               environment on): Slurm's SIGKILL of the step (`scancel --signal=KILL`);
#   crun        the reference.
# Prints the median (min-max) in ms of each, and how many took over a second (slurmstepd's
# wait after Slurm's SIGKILL, most of a second), then checks that nothing was left behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
EACH="${BENCH_KILL_RUNS:-7}"
out="$(mktemp -d)"
trap 'podman rm -f -t 0 bench-kill >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
site_file="$(dirname "$VENV_BIN")/etc/scrun/scrun.toml"
grep -q '^exec_command' "$site_file" ||
  echo "== $site_file has no exec_command: scrun derives it from oci.conf's RunTimeQuery, or sends Slurm's SIGKILL"
grep -v '^exec_command' "$site_file" >"$out/via-slurm.toml"
cat >"$out/via-slurm" <<WRAPPER
#!/bin/sh
SCRUN_SITE_CONFIG=$out/via-slurm.toml exec $VENV_BIN/scrun "\$@"
WRAPPER
chmod 755 "$out/via-slurm"
sed -e "s|^scrun = .*|&\nvia_slurm = [\"$out/via-slurm\"]|" \
  -e '/^runtime_supports/s|"scrun"|&, "via_slurm"|' "$CONTAINERS_CONF" >"$out/containers.conf"
export CONTAINERS_CONF="$out/containers.conf"

# removal MODE: ms `podman rm -f -t 0` takes, appended to $out/MODE
removal() {
  local mode="$1" start
  podman --runtime "${mode/-/_}" run -d --name bench-kill localhost/busybox sleep 600 >/dev/null
  sleep 1.5  # the step's process runs by then
  start="$(date +%s%N)"
  podman rm -f -t 0 bench-kill >/dev/null
  echo $((($(date +%s%N) - start) / 1000000)) >>"$out/ms.$mode"
}

echo "== podman rm -f -t 0 of a running container: $EACH of each, interleaved ($(nproc) cores;" \
  "$(srun --version); $(podman --version))"
for _ in $(seq "$EACH"); do
  for mode in scrun via-slurm crun; do removal "$mode"; done
done
for mode in scrun via-slurm crun; do
  python3 -c 'import statistics, sys
ms = [int(line) for line in open(sys.argv[2])]
slow = sum(m >= 1000 for m in ms)
print(f"{sys.argv[1]:10} {statistics.median(ms):6.0f} ms ({min(ms)}-{max(ms)}), "
      f"{slow} of {len(ms)} over 1 s")' "$mode" "$out/ms.$mode"
done
nothing_left
