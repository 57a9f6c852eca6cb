#!/usr/bin/env bash
# harness/docker-down.sh [DIR] -- stop exactly the dockerd and containerd docker-up.sh
# started (pids in DIR/run/ourpid.{dockerd,containerd}; each pid's command line is checked
# first, since pids get reused). dockerd first: it stops its running containers (through
# `scrun kill`/`delete`, so their Slurm jobs end) before it exits. TERM, then KILL after
# 30 s (dockerd) / 10 s (containerd). Never kills by name. The image store in DIR/docker
# stays for the next docker-up.sh. Also stops the test users' rootless dockerds
# (DIR/run/ourpid.rootless-docker-USER). Exit 1 if one of them survived even SIGKILL.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
D="${1:-${SCRUN_CLUSTER_DIR:-/tmp/scrun-cluster}}"
RUN="$D/run"
DK="$D/docker"
[ -d "$RUN" ] || { echo "[docker-down] nothing to do ($RUN missing)" >&2; exit 0; }

log() { echo "[docker-down] $*" >&2; }
failed=0

# running <pid>: exists and is not a zombie (an unreaped zombie is as good as gone)
running() {
  local st; st="$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)"
  [ -n "$st" ] && [ "$st" != Z ]
}

stop_pid() { # stop_pid <pid> <what> <seconds before KILL>
  local pid="$1" what="$2" secs="$3" i
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < secs * 10; i++)); do running "$pid" || return 0; sleep 0.1; done
  log "$what pid $pid still alive after $secs s, SIGKILL"
  kill -KILL "$pid" 2>/dev/null
  for i in $(seq 50); do running "$pid" || return 0; sleep 0.1; done
  log "ERROR: $what pid $pid survived SIGKILL"
  failed=1
}

stop_pidfile() { # stop_pidfile <pidfile> <cmdline-substring> <seconds before KILL>
  local pf="$1" want="$2" pid
  [ -s "$pf" ] || { rm -f "$pf"; return 0; }
  pid="$(cat "$pf")"
  if alive "$pf" "$want"; then
    log "stopping $want (pid $pid)"
    stop_pid "$pid" "$want" "$3"
  fi
  rm -f "$pf"
}

stop_pidfile "$RUN/ourpid.dockerd" dockerd 30
stop_pidfile "$RUN/ourpid.containerd" containerd 10
# the test users' rootless dockerds (harness/rootless-docker.sh), if a test run left one
for pf in "$RUN"/ourpid.rootless-docker-*; do
  [ -e "$pf" ] && stop_pidfile "$pf" dockerd 30
done

# A container shim outlives containerd by design. One still running serves a container
# dockerd could not stop; it is ours only if its command line names OUR containerd socket.
for proc in /proc/[0-9]*; do
  cmd="$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline")" || continue
  case "$cmd" in
    *containerd-shim*"-address $DK/containerd.sock "*)
      log "container shim left behind, stopping it: ${proc#/proc/} $cmd"
      stop_pid "${proc#/proc/}" containerd-shim 5 ;;
  esac
done
rm -f "$DK/docker.sock" "$DK/containerd.sock" "$DK/containerd.sock.ttrpc"
exit "$failed"
