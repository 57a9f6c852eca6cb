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

UPSTREAM="${UPSTREAM_SCRUN:-/usr/bin/scrun}"  # Slurm's own scrun (the C one, Slurm >= 23.02)

# upstream_runtime DIR: podman's runtime "upstream" (CONTAINERS_CONF is made to name it, in
# DIR), Slurm's own scrun $UPSTREAM with a config dir of its own in DIR. Returns 1, saying
# why, when this cluster's Slurm cannot run the cluster's scrun.lua in upstream's scrun, 2
# when /etc/slurm/slurm.conf is another cluster's; UPSTREAM_LINKED names the
# /etc/slurm/slurm.conf it linked, for the caller to remove.
# shellcheck disable=SC2034  # UPSTREAM_LINKED is the caller's
upstream_runtime() {
  local B="$1"
  UPSTREAM_LINKED=""
  # upstream's own config dir: the cluster's configs (it reads oci.conf too) and the same
  # scrun.lua as ours (docs/scrun-lua/shared-scratch.lua): the nodes are other hosts, so both
  # stage every container through the shared dir. That script parses config.json with
  # slurm.from_json/to_json, which upstream's Lua has only since 26.05; 26.05.5's to_json fails
  # on arrays, so upstream's copy starts with bench/upstream-to-json.lua, a to_json in Lua where
  # Slurm's fails. Without it, upstream's stage-in fails and its anchor never exits (every run
  # hangs).
  local slurm_release
  slurm_release="$(srun --version | awk '{print $2}')"
  if [ "$(printf '%s\n' 26.05 "$slurm_release" | sort -V | head -1)" != 26.05 ]; then
    echo "== upstream scrun $slurm_release has no slurm.from_json/to_json (26.05 added them), which"
    echo "   the cluster's staging scrun.lua needs: no comparison with upstream on this cluster"
    return 1
  fi
  mkdir -p "$B/etc" "$B/root"
  cp "$(dirname "$SLURM_CONF")"/*.conf "$B/etc/"
  cat "$BENCH_DIR/upstream-to-json.lua" "$(dirname "$SLURM_CONF")/scrun.lua" >"$B/etc/scrun.lua"
  if [ ! -e /etc/slurm/slurm.conf ]; then
    mkdir -p /etc/slurm
    ln -s "$SLURM_CONF" /etc/slurm/slurm.conf
    UPSTREAM_LINKED=/etc/slurm/slurm.conf
  elif [ "$(readlink -f /etc/slurm/slurm.conf)" != "$(readlink -f "$SLURM_CONF")" ]; then
    echo "/etc/slurm/slurm.conf is another cluster's: upstream scrun's srun would use it" >&2
    return 2
  fi

  # As root, upstream scrun refuses to guess its state dir: --root.
  cat >"$B/upstream-scrun" <<EOF
#!/bin/sh
exec env SLURM_CONF=$B/etc/slurm.conf $UPSTREAM --root=$B/root "\$@"
EOF
  chmod 755 "$B/upstream-scrun"
  # podman: the cluster's containers.conf plus the runtime "upstream"
  sed -e "s|^\\[engine.runtimes\\]|&\\nupstream = [\"$B/upstream-scrun\"]|" \
    -e 's|"scrun"\]|"scrun", "upstream"]|g' "$CONTAINERS_CONF" >"$B/containers.conf"
  export CONTAINERS_CONF="$B/containers.conf"
}

# write_reap FILE LABEL: FILE, a script that ends what a run left behind: the containers
# labelled LABEL go (podman rm); first, a stuck upstream anchor of one of them (its command
# line is "scrun: <container id>") gets SIGTERM, which lets its client finish.
write_reap() {
  cat >"$1" <<EOF
#!/bin/sh
ids="\$(podman ps -aq --no-trunc --filter label=$2)"
[ -n "\$ids" ] || exit 0
for d in /proc/[0-9]*; do
  line="\$(tr '\\0' ' ' <"\$d/cmdline" 2>/dev/null)"
  case "\$line" in "scrun: "*) ;; *) continue ;; esac
  for id in \$ids; do
    case "\$line" in "scrun: \$id"*) kill -TERM "\${d#/proc/}" 2>/dev/null ;; esac
  done
done
timeout -k 1 20 podman rm -f -t 0 \$ids >/dev/null 2>&1
exit 0
EOF
  chmod 755 "$1"
}

# upstream_bench: what a bench of upstream's scrun beside ours needs (upstream.sh, grant.sh);
# exits 0, saying why, where there is none to run. B: a directory of the bench's own, with
# the reap script ($B/reap, write_reap: label scrun-bench) and podman's runtime "upstream"
# (upstream_runtime). At exit: the processes BENCH_PIDS names are ended, what the runs
# left reaped, the /etc/slurm/slurm.conf link removed, B removed.
BENCH_PIDS=""
upstream_bench() {
  if [ ! -x "$UPSTREAM" ]; then
    echo "== no $UPSTREAM (Slurm >= 23.02 installs it): no comparison with upstream scrun"
    exit 0
  fi
  B="$(mktemp -d /tmp/scrun-bench.XXXXXX)"
  # shellcheck disable=SC2064  # B is fixed now; the rest is read at exit
  trap "[ -z \"\$BENCH_PIDS\" ] || kill \$BENCH_PIDS 2>/dev/null
    '$B/reap' 2>/dev/null || true
    [ -z \"\$UPSTREAM_LINKED\" ] || rm -f \"\$UPSTREAM_LINKED\"
    rm -rf '$B'" EXIT
  local available=0
  upstream_runtime "$B" || available=$?
  case "$available" in 0) ;; 1) exit 0 ;; *) exit 1 ;; esac
  write_reap "$B/reap" scrun-bench
}
