# shellcheck shell=bash
# bench/lib.sh -- sourced by the bench scripts: the private cluster's checks they share.
: "${CONTAINERS_CONF:?run through make bench, or eval \"\$(make -s env)\" first}"
VENV_BIN="$(dirname "$(command -v scrun)")"   # this venv's scrun processes, not others'
SPOOL_ROOT="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/scrun"

# VmRSS of a pid in kB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# Print what the runs whose container ids are in the files "$@" left behind, and fail if
# anything: a spool directory, a process of ours, a job of the private cluster.
nothing_left() {
  local left=0 id
  for file in "$@"; do
    id="$(cat "$file")"
    if [ -e "$SPOOL_ROOT/$id" ]; then echo "left: spool directory of $id"; left=1; fi
  done
  if pgrep -f "$VENV_BIN/scrun" >/dev/null; then
    echo "left: scrun processes $(pgrep -f "$VENV_BIN/scrun" | tr '\n' ' ')"; left=1
  fi
  if [ -n "$(squeue -h -o %i)" ]; then echo "left: jobs $(squeue -h -o %i | tr '\n' ' ')"; left=1; fi
  [ "$left" = 0 ] && echo "nothing left behind (spool directories, anchors, jobs)"
  return "$left"
}
