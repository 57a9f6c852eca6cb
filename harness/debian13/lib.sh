# shellcheck shell=bash
# harness/debian13/lib.sh -- sourced by the Debian 13 platform scripts (not run on its own).
# One place for the layout of the Debian 13 "trixie" root and of the cluster inside it.
#
# The root is a debootstrapped trixie system on this (Debian 12) machine. A copy of the
# project lives in it at the SAME path (root.sh refreshes it), so the Makefile, harness/*.sh
# and the tests run unchanged inside it, against the root's Slurm 24.11 and podman 5.4.
#
# Knobs (environment; the defaults let both platforms run at once):
#   DEBIAN13_ROOT            the root (default /var/lib/scrun/debian13: outside any clone,
#                            so a fresh clone on the same machine reuses it)
#   DEBIAN13_MIRROR          Debian mirror (default: the host's, else deb.debian.org)
#   DEBIAN13_CLUSTER_DIR     cluster dir INSIDE the root (default /tmp/scrun-cluster)
#   DEBIAN13_SLURMCTLD_PORT  (7817)   DEBIAN13_SLURMD_PORT (7818; the second node +1)

HARNESS13="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HARNESS13/../.." && pwd -P)"
R="${DEBIAN13_ROOT:-/var/lib/scrun/debian13}"
CLUSTER13="${DEBIAN13_CLUSTER_DIR:-/tmp/scrun-cluster}"
# the mount namespace of the root (root.sh), kept alive by a bind mount on this file
NS="/run/scrun-debian13/$(printf '%s' "$R" | sha1sum | cut -c1-12).mnt"
case ":$PATH:" in *":/usr/sbin:"*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
export PATH

log13() { echo "[debian13] $*" >&2; }
die13() { log13 "ERROR: $*"; exit 1; }

# in_root <pid>: the process runs inside the root (in its mount namespace)
in_root() {
  local ns; ns="$(stat -L -c %i "$NS" 2>/dev/null)"
  [ -n "$ns" ] && [ "$(stat -L -c %i "/proc/$1/ns/mnt" 2>/dev/null)" = "$ns" ]
}

# enter13 CMD...: run CMD inside the root (in its mount namespace, made by root.sh), in the
# project's copy there, with a clean environment (what a login on a Debian 13 machine would
# have) plus the Debian 13 cluster's knobs.
# shellcheck disable=SC2016  # the inner sh expands "$1" and "$@"
enter13() {
  local pass=() v
  # a few of the caller's settings go in (the rest of its environment stays outside)
  for v in CI PYTEST_ARGS TEST_TIMEOUT BENCH_RUNS BENCH_TIMEOUT; do
    [ -n "${!v:-}" ] && pass+=("$v=${!v}")
  done
  nsenter --mount="$NS" -- /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PODMAN_IGNORE_CGROUPSV1_WARNING=1 \
    SCRUN_PLATFORM=debian13 \
    SCRUN_CLUSTER_DIR="$CLUSTER13" \
    SLURMCTLD_PORT="${DEBIAN13_SLURMCTLD_PORT:-7817}" \
    SLURMD_PORT="${DEBIAN13_SLURMD_PORT:-7818}" \
    "${pass[@]}" \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$REPO" "$@"
}
