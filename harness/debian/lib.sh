# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the scripts that source this file
# harness/debian/lib.sh -- sourced by the Debian platform scripts (root.sh, run.sh, down.sh;
# not run on its own). One place for the layout of a debootstrapped Debian root and of the
# cluster inside it, for every Debian platform this machine runs beside its own:
#
#   platform   suite    what it brings                                       ports (ctld, nodes)
#   debian13   trixie   Slurm 24.11, podman 5.4, docker 26.1, Python 3.13      7817, 7818-
#   debian14   forky    Slurm 26.05, podman 5.8, docker 28.5, Python 3.14      7917, 7918-
#
# A copy of the project lives in the root at the SAME path (root.sh refreshes it), so the
# Makefile, harness/*.sh and the tests run unchanged inside it, against the root's packages.
#
# Knobs (environment), named after the platform in capitals (DEBIAN13_…, DEBIAN14_…); the
# defaults let every platform's cluster run at once:
#   <P>_ROOT             the root (default /var/lib/scrun/<platform>: outside any clone, so a
#                        fresh clone on the same machine reuses it)
#   <P>_MIRROR           Debian mirror (default: the host's, else deb.debian.org)
#   <P>_CLUSTER_DIR      cluster dir INSIDE the root (default /tmp/scrun-cluster)
#   <P>_SLURMCTLD_PORT   slurmctld's port    <P>_SLURMD_PORT  the first node's (next node +1)
# SCRUN_APT_CACHE: where root builds keep the .deb files they fetched, one directory per
# platform (default /var/cache/scrun-apt/<platform>): a rebuild (the root deleted, the
# archive moved on) fetches only what changed, and builds of two platforms can run at once
# (apt locks its archives directory).

DEBIAN_HARNESS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$DEBIAN_HARNESS/../.." && pwd -P)"
PLATFORMS="debian13 debian14"
case ":$PATH:" in *":/usr/sbin:"*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
export PATH

log() { echo "[${PLATFORM:-debian}] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# knob NAME DEFAULT: the platform's <P>_NAME, else DEFAULT
knob() {
  local var="${PLATFORM^^}_$1"
  echo "${!var:-$2}"
}

# platform_init NAME: the platform's layout in PLATFORM, SUITE, R (the root), CLUSTER (inside
# it), CTLD_PORT, SLURMD_PORT, APT_CACHE, NS (its mount namespace, kept alive by a bind
# mount on it)
platform_init() {
  PLATFORM="${1:-}"
  local ctld
  case "$PLATFORM" in
    debian13) SUITE=trixie ctld=7817 ;;
    debian14) SUITE=forky ctld=7917 ;;
    *) PLATFORM="" die "unknown platform '${1:-}' (one of: $PLATFORMS)" ;;
  esac
  R="$(knob ROOT "/var/lib/scrun/$PLATFORM")"
  CLUSTER="$(knob CLUSTER_DIR /tmp/scrun-cluster)"
  CTLD_PORT="$(knob SLURMCTLD_PORT "$ctld")"
  SLURMD_PORT="$(knob SLURMD_PORT $((ctld + 1)))"
  APT_CACHE="${SCRUN_APT_CACHE:-/var/cache/scrun-apt}/$PLATFORM"
  NS="/run/scrun-$PLATFORM/$(printf '%s' "$R" | sha1sum | cut -c1-12).mnt"
}

# in_root <pid>: the process runs inside the root (in its mount namespace)
in_root() {
  local ns; ns="$(stat -L -c %i "$NS" 2>/dev/null)"
  [ -n "$ns" ] && [ "$(stat -L -c %i "/proc/$1/ns/mnt" 2>/dev/null)" = "$ns" ]
}

# mounts_under DIR: the mount points at or below DIR, deepest first (to unmount in order)
mounts_under() {
  awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r
}

# enter CMD...: run CMD inside the root (in its mount namespace, made by root.sh), in the
# project's copy there, with a clean environment (what a login on such a Debian machine
# would have) plus the platform cluster's knobs.
# shellcheck disable=SC2016  # the inner sh expands "$1" and "$@"
enter() {
  local pass=() v
  # a few of the caller's settings go in (the rest of its environment stays outside)
  for v in CI PYTEST_ARGS TEST_TIMEOUT BENCH_RUNS BENCH_TIMEOUT; do
    [ -n "${!v:-}" ] && pass+=("$v=${!v}")
  done
  nsenter --mount="$NS" -- /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PODMAN_IGNORE_CGROUPSV1_WARNING=1 \
    SCRUN_PLATFORM="$PLATFORM" \
    SCRUN_CLUSTER_DIR="$CLUSTER" \
    SLURMCTLD_PORT="$CTLD_PORT" \
    SLURMD_PORT="$SLURMD_PORT" \
    "${pass[@]}" \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$REPO" "$@"
}
