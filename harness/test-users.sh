#!/usr/bin/env bash
# harness/test-users.sh [DIR] -- the two unprivileged test users and their rootless podman:
#   * users SCRUN_TEST_USER (default scruntest) and SCRUN_TEST_USER2 (default scruntest2),
#     created when missing, each with its own /etc/subuid and /etc/subgid range
#   * /run/user/<uid> on this (login) host, owned by the user, mode 0700 (there is no logind
#     to make it): rootless podman keeps its runtime state there, and scrun its spool
#     (cluster-up.sh makes the nodes' own /run/user/<uid>, crun's --root there)
#   * ~/.config/containers/containers.conf registering the runtime `scrun` (this checkout's
#     .venv/bin/scrun), and storage.conf with the vfs driver and the image store on this
#     host's local disk (/var/tmp/scrun-storage/<user>); /etc/containers is never touched
#   * localhost/busybox:latest in each user's own (rootless) image store
# Writes DIR/etc/test-user and DIR/etc/test-user2 (harness/env.sh exports them).
# Idempotent; called by cluster-up.sh after podman-setup.sh. Everything is a function of its
# own, so another platform's harness can call the same steps.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "${1:-}"
log() { echo "[test-users] $*" >&2; }

# ensure_user NAME: the account, with a home and a login shell.
ensure_user() {
  local name="$1"
  if ! id "$name" >/dev/null 2>&1; then
    log "creating user $name"
    useradd -m -s /bin/bash "$name"
  fi
}

# ensure_subids NAME: a range of 65536 subordinate uids and gids, after every range in use.
# crun and rootless podman map the container's other ids there (newuidmap/newgidmap).
ensure_subids() {
  local name="$1" file start
  for file in /etc/subuid /etc/subgid; do
    touch "$file"
    grep -q "^$name:" "$file" && continue
    start="$(awk -F: 'BEGIN {m = 100000} {e = $2 + $3; if (e > m) m = e} END {print m}' "$file")"
    echo "$name:$start:65536" >>"$file"
    log "added $name:$start:65536 to $file"
  done
}

# private_dir NAME DIR: DIR, a directory owned by NAME, mode 0700 (one that is a link or
# someone else's is replaced: it could redirect the user's files).
private_dir() {
  local name="$1" dir="$2" uid
  uid="$(id -u "$name")"
  if [ -L "$dir" ] || { [ -e "$dir" ] && [ "$(stat -c %u "$dir")" != "$uid" ]; }; then
    log "replacing $dir (not a directory owned by $name)"
    rm -rf "$dir"
  fi
  install -d -m 700 -o "$uid" -g "$(id -g "$name")" "$dir"
}

# ensure_runtime_dirs NAME: /run/user/<uid>, as logind would make it at login, and the
# user's image store (storage.conf's graphroot) on this host's local disk, before another
# user could take their names.
ensure_runtime_dirs() {
  local name="$1" uid
  uid="$(id -u "$name")"
  mkdir -p /run/user /var/tmp/scrun-storage
  chmod 755 /run/user /var/tmp/scrun-storage
  private_dir "$name" "/run/user/$uid"
  private_dir "$name" "$(user_graphroot "$name")"
}

# user_graphroot NAME: the user's rootless image store. Not in the home directory, which
# the nodes share: at a site podman storage lives on the login node's local disk (podman
# storage on NFS is troublesome), and the nodes see containers only through scrun.lua.
user_graphroot() {
  echo "/var/tmp/scrun-storage/$1"
}

# as_user NAME CMD...: CMD as NAME with a login-like environment (no logind here).
as_user() {
  local name="$1" uid home
  shift
  uid="$(id -u "$name")"
  home="$(getent passwd "$name" | cut -d: -f6)"
  local keep=()  # podman 5 on cgroups v1 (the Debian 13 root) warns on every call without it
  [ -z "${PODMAN_IGNORE_CGROUPSV1_WARNING:-}" ] || keep+=(PODMAN_IGNORE_CGROUPSV1_WARNING=1)
  (cd / && runuser -u "$name" -- env -i HOME="$home" USER="$name" LOGNAME="$name" \
    PATH=/usr/local/bin:/usr/bin:/bin XDG_RUNTIME_DIR="/run/user/$uid" "${keep[@]}" "$@")
}

# user_containers_conf NAME: rootless podman's containers.conf with the runtime `scrun`,
# the same as root's (lib.sh says why each key).
user_containers_conf() {
  local name="$1" home conf
  home="$(getent passwd "$name" | cut -d: -f6)"
  conf="$home/.config/containers/containers.conf"
  as_user "$name" mkdir -p "$home/.config/containers"
  containers_conf "# written by harness/test-users.sh: rootless podman with the runtime scrun" \
    >"$conf.new"
  chown "$name:" "$conf.new"
  if cmp -s "$conf.new" "$conf"; then rm -f "$conf.new"; else mv "$conf.new" "$conf"; log "wrote $conf"; fi
  # vfs: each container's rootfs is a plain directory (podman 4.3 without fuse-overlayfs
  # picks vfs anyway; newer podman would pick overlay, which only podman's namespace can
  # see), on this host's local disk: the nodes get it through scrun.lua's staging.
  conf="$home/.config/containers/storage.conf"
  printf '# written by harness/test-users.sh\n[storage]\ndriver = "vfs"\ngraphroot = "%s"\n' \
    "$(user_graphroot "$name")" >"$conf.new"
  chown "$name:" "$conf.new"
  if cmp -s "$conf.new" "$conf"; then rm -f "$conf.new"; else mv "$conf.new" "$conf"; log "wrote $conf"; fi
}

# user_image NAME: localhost/busybox in the user's own image store, and a smoke test of
# rootless podman with crun (only after a change: a run costs about half a second).
user_image() {
  local name="$1" home tarball ok out
  home="$(getent passwd "$name" | cut -d: -f6)"
  tarball="$CTR/busybox-rootfs.tar"
  [ -s "$tarball" ] || { log "ERROR: $tarball missing (podman-setup.sh makes it)"; exit 1; }
  if ! as_user "$name" podman image exists localhost/busybox:latest; then
    log "podman import -> localhost/busybox:latest for $name"
    as_user "$name" podman import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' \
      - localhost/busybox:latest <"$tarball" >/dev/null
  fi
  ok="$home/.config/containers/.scrun-smoke-ok"
  if [ ! -e "$ok" ] || [ "$home/.config/containers/containers.conf" -nt "$ok" ]; then
    out="$(as_user "$name" podman --runtime crun run --rm localhost/busybox echo podman-ok 2>&1)" \
      || { log "rootless podman smoke test as $name failed: $out"; exit 1; }
    [ "$out" = podman-ok ] || { log "rootless podman as $name printed: $out"; exit 1; }
    as_user "$name" touch "$ok"
    log "rootless podman --runtime crun run as $name: ok"
  fi
}

# setup_user NAME RECORD: everything above for one user; RECORD names the file under
# DIR/etc that remembers the user for harness/env.sh.
setup_user() {
  local name="$1" record="$2"
  ensure_user "$name"
  ensure_subids "$name"
  ensure_runtime_dirs "$name"
  if [ "${SKIP_PODMAN:-0}" != 1 ]; then
    user_containers_conf "$name"
    user_image "$name"
  fi
  echo "$name" >"$ETC/$record.new" && mv "$ETC/$record.new" "$ETC/$record"
}

user1="${SCRUN_TEST_USER:-scruntest}"
user2="${SCRUN_TEST_USER2:-scruntest2}"
[ "$user1" != "$user2" ] || { log "ERROR: SCRUN_TEST_USER and SCRUN_TEST_USER2 are both $user1"; exit 1; }
setup_user "$user1" test-user
setup_user "$user2" test-user2
