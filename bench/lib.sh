# shellcheck shell=bash
# bench/lib.sh -- sourced by the bench scripts: the private cluster's environment and checks.
: "${CONTAINERS_CONF:?run through make bench, or eval \"\$(make -s env)\" first}"
# The bundle `srun --container` runs directly (the harness's), kept under a name of its own:
# the harness's SCRUN_* variables (platform, test users, paths) are no user's, and podman 5
# passes its environment on to the runtime, where scrun would note each as an unknown
# variable. No runtime in the bench gets them.
BENCH_BUNDLE="${BENCH_BUNDLE:-${SCRUN_TEST_BUNDLE:?run through make bench}}"
export BENCH_BUNDLE
for variable in $(compgen -v SCRUN_); do unset "$variable"; done
VENV_BIN="$(dirname "$(command -v scrun)")"   # this venv's scrun processes, not others'
SPOOL_ROOT="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/scrun"

RUNS="${BENCH_RUNS:-20}"
ROUNDS="${BENCH_ROUNDS:-4}"
BENCH_DIR="$(dirname "${BASH_SOURCE[0]}")"

# hyperfine over COMMANDS in ROUNDS interleaved rounds (together RUNS runs of each), merged
# into OUT (hyperfine's JSON): this VM drifts by 10-30 % over a minute, and in one hyperfine
# run the command measured last would take the drift alone.
# Usage: rounds OUT [HYPERFINE-OPTION...] -- COMMAND...
rounds() {
  local out="$1" round options=()
  shift
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  for round in $(seq "$ROUNDS"); do
    echo "-- round $round of $ROUNDS"
    # a failed run fails hyperfine, and the pipeline (pipefail); a grep without a match not
    hyperfine -N -r "$(((RUNS + ROUNDS - 1) / ROUNDS))" "${options[@]}" \
      --export-json "$out.$round" "$@" | { grep -E "Benchmark|Time" || true; }
  done
  python3 "$BENCH_DIR/merge_rounds.py" "$out".[0-9]* >"$out"
}

# Wait for the background runs whose pids are given; fail, saying how many failed, if any did
# (a bare `wait` returns 0 whatever they returned).
wait_all() {
  local pid failed=0
  for pid in "$@"; do wait "$pid" || failed=$((failed + 1)); done
  if [ "$failed" != 0 ]; then
    echo "bench: $failed of $# runs failed" >&2
    return 1
  fi
}

# VmRSS of a pid in kB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# Print what scrun left behind, and fail if anything: a spool directory of a container
# podman no longer knows, a process of ours, a job of the private cluster. (Not by the runs'
# --cidfile: podman 5 removes that file with the container.)
nothing_left() {
  local left=0 dir
  for dir in "$SPOOL_ROOT"/*/; do
    [ -d "$dir" ] || continue
    podman container exists "$(basename "$dir")" && continue
    echo "left: spool directory $dir"; left=1
  done
  # an anchor still ending its job when podman returned gets 5 s (read once: one that ends
  # between two looks is not a leftover)
  local procs=""
  for _ in $(seq 50); do
    procs="$(pgrep -f "$VENV_BIN/scrun" | tr '\n' ' ' || true)"
    [ -n "$procs" ] || break
    sleep 0.1
  done
  if [ -n "$procs" ]; then echo "left: scrun processes $procs"; left=1; fi
  if [ -n "$(squeue -h -o %i)" ]; then echo "left: jobs $(squeue -h -o %i | tr '\n' ' ')"; left=1; fi
  [ "$left" = 0 ] && echo "nothing left behind (spool directories, anchors, jobs)"
  return "$left"
}

# Make SITE a site of its own for scrun: the cluster's configs (not its scrun.lua) in
# SITE/etc, named by a site file that the wrapper SITE/scrun hands to scrun (scrun finds
# scrun.lua beside slurm.conf), and SITE/containers.conf naming that wrapper as podman's
# `scrun` runtime.
make_site() {
  local site="$1"
  mkdir -p "$site/etc"
  cp "$(dirname "$SLURM_CONF")"/*.conf "$site/etc/"
  cat >"$site/scrun.toml" <<EOF
slurm_conf = "$site/etc/slurm.conf"
bin_dir = "$(dirname "$(command -v srun)")"
EOF
  cat >"$site/scrun" <<EOF
#!/bin/sh
SCRUN_SITE_CONFIG=$site/scrun.toml exec $VENV_BIN/scrun "\$@"
EOF
  chmod 755 "$site/scrun"
  sed "s|^scrun = .*|scrun = [\"$site/scrun\"]|" "$CONTAINERS_CONF" >"$site/containers.conf"
}
