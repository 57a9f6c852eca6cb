#!/usr/bin/env bash
# harness/podman-setup.sh [DIR] -- podman for the tests, without touching /etc/containers:
#   * DIR/containers/containers.conf: a PRIVATE config, used through CONTAINERS_CONF
#     (it registers the runtime name "scrun" -> <repo>/.venv/bin/scrun)
#   * image localhost/busybox:latest imported from a busybox-static rootfs tarball
#     (no registry is reachable), in podman's normal (root) storage
#   * the hybrid-cgroup fix crun needs
# Idempotent; called by cluster-up.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "${1:-}"
log() { echo "[podman-setup] $*" >&2; }

# ------------------------------------------------------------------ cgroups
# crun refuses a hybrid cgroup layout while any controller is still attached to the v2
# hierarchy ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2").
# Debian's hybrid layout leaves hugetlb there: bind it to its own v1 hierarchy instead.
U=/sys/fs/cgroup/unified
if [ -f "$U/cgroup.controllers" ] && [ -n "$(cat "$U/cgroup.controllers")" ]; then
  for c in $(<"$U/cgroup.controllers"); do
    if ! mountpoint -q "/sys/fs/cgroup/$c"; then
      log "moving cgroup controller $c from cgroup2 to a v1 hierarchy"
      # shellcheck disable=SC2015  # either failing is worth the same warning
      mkdir -p "/sys/fs/cgroup/$c" && mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" \
        || log "warning: could not mount the $c controller (crun in podman may fail)"
    fi
  done
fi

# ------------------------------------------------------------------ containers.conf
mkdir -p "$CTR"
conf="$CTR/containers.conf"
containers_conf "# written by harness/podman-setup.sh; used via CONTAINERS_CONF=$conf" >"$conf.new"
if cmp -s "$conf.new" "$conf"; then rm -f "$conf.new"; else mv "$conf.new" "$conf"; log "wrote $conf"; fi
export CONTAINERS_CONF="$conf"

# ------------------------------------------------------------------ busybox image
tarball="$CTR/busybox-rootfs.tar"
if [ ! -s "$tarball" ]; then
  log "building $tarball"
  r="$(mktemp -d)"
  "$HARNESS/mkrootfs.sh" "$r"
  tar -C "$r" -cf "$tarball.new" . && mv "$tarball.new" "$tarball"
  rm -rf "$r"
fi
fresh=0
if ! podman image exists localhost/busybox:latest; then
  log "podman import -> localhost/busybox:latest"
  podman import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' \
    "$tarball" localhost/busybox:latest >/dev/null
  fresh=1
fi

# Only after a change (a run costs ~0.5 s): prove podman + crun work with this config.
ok="$CTR/.smoke-ok"
if [ "$fresh" = 1 ] || [ ! -e "$ok" ] || [ "$conf" -nt "$ok" ]; then
  out="$(podman --runtime crun run --rm localhost/busybox echo podman-ok 2>&1)" \
    || { log "podman smoke test failed: $out"; exit 1; }
  [ "$out" = podman-ok ] || { log "podman smoke test printed: $out"; exit 1; }
  touch "$ok"
  log "podman --runtime crun run: ok"
fi
