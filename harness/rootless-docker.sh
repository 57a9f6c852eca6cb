#!/usr/bin/env bash
# harness/rootless-docker.sh up|down USER [DIR] -- a rootless dockerd (rootlesskit) of USER,
# with the runtime `scrun`, as upstream documents for docker with scrun:
#   * rootlesskit --net=host (DOCKERD_ROOTLESS_ROOTLESSKIT_NET=host): no slirp4netns needed,
#     and scrun reaches slurmctld; no port driver; the vfs storage driver (plain directories)
#   * data root /var/tmp/scrun-storage/<user>-docker on this host's local disk (the nodes get
#     containers through scrun.lua's staging), exec root and socket under /run/user/<uid>
#     (scrun's state for it: <exec root>/runtime-runc/moby), log in DIR/log
#   * no bridge, iptables rules or IP forwarding (with ip_forward 0 on the host, a rootless
#     dockerd that tries to enable it fails to start: it cannot write /proc/sys)
#   * localhost/busybox:latest imported from the harness's busybox tarball
# Prints `export DOCKER_HOST=unix://...` on stdout. `down` stops exactly the dockerd pid
# recorded in DIR/run/ourpid.rootless-docker-USER (TERM, KILL after 30 s): dockerd stops its
# containers, then rootlesskit ends with it. Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
action="${1:?usage: rootless-docker.sh up|down USER [DIR]}"
user="${2:?usage: rootless-docker.sh up|down USER [DIR]}"
cluster_paths "${3:-}"
log() { echo "[rootless-docker] $*" >&2; }

uid="$(id -u "$user")"
home="$(getent passwd "$user" | cut -d: -f6)"
data="/var/tmp/scrun-storage/$user-docker"
exec_root="/run/user/$uid/scrun-test-docker"
sock="/run/user/$uid/scrun-test-docker.sock"
pidfile="$RUN/ourpid.rootless-docker-$user"
conf="$D/docker-rootless/daemon.json"

# as_user CMD...: CMD as the user, in a login-like environment with /usr/sbin (dockerd).
as_user() {
  (cd / && runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin XDG_RUNTIME_DIR="/run/user/$uid" \
    DOCKER_HOST="unix://$sock" "$@")
}

rootless_script() {
  local candidate
  for candidate in /usr/share/docker.io/contrib/dockerd-rootless.sh \
    "$(command -v dockerd-rootless.sh || true)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  log "ERROR: dockerd-rootless.sh not found (package docker.io)"; return 1
}

up() {
  command -v rootlesskit >/dev/null || { log "ERROR: rootlesskit is not installed"; exit 1; }
  [ -d "/run/user/$uid" ] || { log "ERROR: /run/user/$uid missing (harness/test-users.sh)"; exit 1; }
  mkdir -p "$D/docker-rootless"
  cat >"$conf.new" <<EOF
{
  "storage-driver": "vfs",
  "bridge": "none",
  "iptables": false,
  "ip6tables": false,
  "ip-masq": false,
  "ip-forward": false,
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "runtimes": {"scrun": {"path": "$VENV/bin/scrun"}}
}
EOF
  chmod 644 "$conf.new"; mv "$conf.new" "$conf"
  if ! alive "$pidfile" dockerd; then
    local script
    script="$(rootless_script)"
    # docker 28.5 (Debian 14) cannot run a rootless dockerd in the host's network namespace
    # (its libnetwork needs CAP_NET_ADMIN there: moby/moby#51363), and its script refuses
    # --net=host since. scrun's Slurm commands need that namespace (salloc and srun talk to
    # slurmctld and slurmstepd, which call them back): exit 3, "not possible here".
    if grep -q 'Unsupported RootlessKit network driver' "$script"; then
      log "UNSUPPORTED: $(PATH="$PATH:/usr/sbin" dockerd --version 2>/dev/null | cut -d, -f1): a rootless dockerd cannot share the host's network namespace (rootlesskit --net=host; moby/moby#51363), which scrun's Slurm commands need"
      exit 3
    fi
    install -d -m 755 /var/tmp/scrun-storage
    install -d -m 700 -o "$uid" -g "$(id -g "$user")" "$data"
    log "starting rootless dockerd of $user"
    as_user env DOCKERD_ROOTLESS_ROOTLESSKIT_NET=host DOCKERD_ROOTLESS_ROOTLESSKIT_PORT_DRIVER=none \
      setsid "$script" --config-file "$conf" --data-root "$data" --exec-root "$exec_root" \
      --pidfile "$exec_root.pid" -H "unix://$sock" </dev/null >"$D/log/rootless-docker-$user.log" 2>&1 &
    # `docker info`, not `docker version`: Debian 13's dockerd 26.1.5 under rootlesskit
    # --net=host panics serving /version (nil pointer in fillRootlessVersion: rootlesskit
    # reports no network or port driver), while everything else works
    if ! wait_for 60 as_user /usr/bin/docker info; then
      tail -20 "$D/log/rootless-docker-$user.log" >&2
      # one that started but does not answer is stopped like any other (`down`)
      if [ -s "$exec_root.pid" ]; then cp "$exec_root.pid" "$pidfile" && down; fi
      log "ERROR: rootless dockerd did not start"; exit 1
    fi
    # dockerd's own pid (rootlesskit makes no pid namespace): what `down` stops
    cp "$exec_root.pid" "$pidfile"
  fi
  if ! as_user /usr/bin/docker image inspect localhost/busybox:latest >/dev/null 2>&1; then
    log "docker import -> localhost/busybox:latest for $user"
    as_user /usr/bin/docker import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' - localhost/busybox:latest \
      <"$CTR/busybox-rootfs.tar" >/dev/null
  fi
  echo "export DOCKER_HOST=unix://$sock"
}

gone() { ! alive "$pidfile" dockerd; }

down() {
  if gone; then rm -f "$pidfile"; return 0; fi
  local pid
  pid="$(cat "$pidfile")"
  log "stopping rootless dockerd of $user (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  wait_for 30 gone || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

case "$action" in
  up) up ;;
  down) down ;;
  *) log "ERROR: unknown action $action (up or down)"; exit 2 ;;
esac
