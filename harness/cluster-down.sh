#!/usr/bin/env bash
# harness/cluster-down.sh [DIR] -- stop exactly the daemons cluster-up.sh started
# (pids in DIR/run/ourpid.*; each pid's /proc/PID/cmdline is checked first, since pids
# get reused). TERM, then KILL after 10 s. Never kills by name.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
D="${1:-${SCRUN_CLUSTER_DIR:-/tmp/scrun-cluster}}"
RUN="$D/run"
[ -d "$RUN" ] || { echo "[cluster-down] nothing to do ($RUN missing)" >&2; exit 0; }

# Order: slurmd(s), then slurmctld, then slurmdbd (slurmctld sends it the last job records)
# and its mariadbd, then munged (the others need munge to say goodbye).
for pf in "$RUN"/ourpid.slurmd-*; do [ -e "$pf" ] && stop_pidfile "$pf" slurmd; done
stop_pidfile "$RUN/ourpid.slurmctld" slurmctld
stop_pidfile "$RUN/ourpid.slurmdbd" slurmdbd
stop_pidfile "$RUN/ourpid.mariadbd" mariadbd
stop_pidfile "$RUN/ourpid.munged" munged
# cluster-up.sh's GPU marker spec on this login host (scrun-cdi's: its guard hook says so)
if grep -qs scrun-gpu-guard "$LOGIN_CDI_SPEC"; then rm -f "$LOGIN_CDI_SPEC"; fi
exit 0
