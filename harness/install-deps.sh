#!/usr/bin/env bash
# harness/install-deps.sh -- install the Debian packages (12, 13 or 14) the harness and the tests need.
# Quick no-op when everything is installed (one dpkg-query); `apt-get update` runs only
# when something is missing. SKIP_APT=1: only report what is missing (exit 1 if anything).
set -euo pipefail

PKGS=(
  slurmctld slurmd slurm-client munge          # the cluster
  slurmdbd mariadb-server-core mariadb-client-core  # accounting.sh: slurmdbd, its MariaDB (+ my_print_defaults)
  crun podman conmon netavark uidmap           # containers: Slurm's oci.conf and podman
  docker.io rootlesskit                        # docker tests: private dockerd + containerd, rootless dockerd
  busybox-static                               # rootfs of the test image and bundle
  lua5.4 lua-cjson                             # scrun.lua tests
  rsync tmux hyperfine                         # staging, tty tests, benchmarks
  python3 python3-venv make                    # the project's venv and Makefile
  shellcheck                                   # make lint: the harness scripts
)

# Debian 13 and later ship the docker client in its own package (Debian 12's docker.io has it).
# Debian testing and unstable have no VERSION_ID: newer than any release.
debian="$(sed -n 's/^VERSION_ID="\{0,1\}\([0-9]*\).*/\1/p' /etc/os-release 2>/dev/null)"
if [ -z "$debian" ] && grep -qx 'ID=debian' /etc/os-release 2>/dev/null; then debian=99; fi
if [ "${debian:-0}" -ge 13 ]; then PKGS+=(docker-cli); fi

# SCRUN_OWN_SLURM=1: Slurm and munge come from elsewhere (a site's own build, first on PATH)
if [ "${SCRUN_OWN_SLURM:-0}" = 1 ]; then
  kept=()
  for p in "${PKGS[@]}"; do
    case "$p" in slurmctld|slurmd|slurmdbd|slurm-client|munge) ;; *) kept+=("$p") ;; esac
  done
  PKGS=("${kept[@]}")
fi

log() { echo "[deps] $*" >&2; }

# Only the benchmarks need hyperfine, and a suite may have none (Debian testing had none):
# any hyperfine on PATH will do (harness/debian/root.sh copies the host's in), and when the
# archive lacks it, the rest is installed without it.
OPTIONAL=(hyperfine)
is_optional() { case " ${OPTIONAL[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

missing=()
while read -r pkg status; do
  [ "$status" = installed ] && continue
  is_optional "$pkg" && command -v "$pkg" >/dev/null && continue
  missing+=("$pkg")
done < <(for p in "${PKGS[@]}"; do
  printf '%s %s\n' "$p" "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || echo missing)"
done)
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "${SKIP_APT:-0}" = 1 ]; then
  log "missing packages (SKIP_APT=1, not installing): ${missing[*]}"
  exit 1
fi
[ "$(id -u)" = 0 ] || { log "need root to install: ${missing[*]}"; exit 1; }

# Package postinst scripts would start the system's munged/slurmctld/slurmd and
# containerd/dockerd (docker.service, docker.socket) through invoke-rc.d or
# deb-systemd-invoke; a system slurmd on port 6818 would collide with ours, and a system
# containerd/dockerd has no business running beside the tests' private ones. Both helpers
# ask policy-rc.d first: a temporary one ("101 = action forbidden", for every service)
# prevents that; removed again on exit.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
log "apt-get update"
apt-get update -q >&2

# What the archive no longer has (Debian testing moves: packages are renamed, split or
# removed) is said in one line here, not met later as a confusing test failure.
gone=() wanted=()
for p in "${missing[@]}"; do
  candidate="$(apt-cache policy "$p" 2>/dev/null | awk '$1 == "Candidate:" {print $2}')"
  if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
    wanted+=("$p")
  elif is_optional "$p"; then
    log "$p: not in this archive, not installed (only the benchmarks need it)"
  else
    gone+=("$p")
  fi
done
if [ "${#gone[@]}" -gt 0 ]; then
  suite="$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null)"
  log "ERROR: the Debian archive (${suite:-of this system}) has no package ${gone[*]}, which the harness needs (harness/install-deps.sh lists them)"
  exit 1
fi
[ "${#wanted[@]}" -eq 0 ] && exit 0
log "apt-get install ${wanted[*]}"
apt-get install -y -q --no-install-recommends "${wanted[@]}" >&2
