#!/usr/bin/env bash
# harness/debian/down.sh PLATFORM -- stop the platform's cluster of this clone (its private
# dockerd, then its Slurm daemons: harness/docker-down.sh and cluster-down.sh inside the
# root, which stop only the pids they recorded) and, when no process runs in the root any
# more, drops the root's mount namespace (all of root.sh's mounts go with it). Keeps the
# root (the cache) and the project's copy in it.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
platform_init "${1:-}"
if mountpoint -q "$NS" && [ -x "$R$REPO/harness/cluster-down.sh" ]; then
  enter harness/docker-down.sh "$CLUSTER"
  enter harness/cluster-down.sh "$CLUSTER"
fi

# Anything still running in the root (another clone's cluster, a shell in the root, or a
# container step of ours that outlived its slurmd): keep the namespace, and say which.
users=""
for d in /proc/[0-9]*; do
  pid="${d#/proc/}"
  in_root "$pid" && users+=" $pid($(cat "$d/comm" 2>/dev/null))"
done
if [ -n "$users" ]; then
  log "processes still run in $R, mounts kept:$users"
  exit 0
fi
umount "$NS" 2>/dev/null && log "dropped the mount namespace of $R (its mounts went with it)"
exit 0
