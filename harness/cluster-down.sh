#!/usr/bin/env bash
# harness/cluster-down.sh [DIR] -- stop exactly the daemons cluster-up.sh started
# (pids in DIR/run/ourpid.*; each pid's /proc/PID/cmdline is checked first, since pids
# get reused). TERM, then KILL after 10 s. Never kills by name.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
D="${1:-${SCRUN_CLUSTER_DIR:-/tmp/scrun-cluster}}"
RUN="$D/run"
[ -d "$RUN" ] || { echo "[cluster-down] nothing to do ($RUN missing)" >&2; exit 0; }

# running <pid>: exists and is not a zombie (an unreaped zombie is as good as gone)
running() {
  local st; st="$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)"
  [ -n "$st" ] && [ "$st" != Z ]
}

stop_pidfile() { # stop_pidfile <pidfile> <cmdline-substring>
  local pf="$1" want="$2" pid
  [ -s "$pf" ] || { rm -f "$pf"; return 0; }
  pid="$(cat "$pf")"
  if alive "$pf" "$want"; then
    echo "[cluster-down] stopping $want (pid $pid)" >&2
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      echo "[cluster-down] $want pid $pid still alive after 10 s, SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
      for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$pf"
}

# Order: slurmd(s), then slurmctld, then munged (the others need munge to say goodbye).
for pf in "$RUN"/ourpid.slurmd-*; do [ -e "$pf" ] && stop_pidfile "$pf" slurmd; done
stop_pidfile "$RUN/ourpid.slurmctld" slurmctld
stop_pidfile "$RUN/ourpid.munged" munged
exit 0
