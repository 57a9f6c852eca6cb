#!/usr/bin/env bash
# harness/docker-up.sh [DIR] -- a PRIVATE containerd + dockerd for the docker tests, with
# the runtime name "scrun" -> <repo>/.venv/bin/scrun and the image localhost/busybox.
# The machine's docker/containerd (config, sockets, /var/lib/docker, /run/docker) is
# never used or changed: everything lives in DIR/docker.
#
#   DIR/docker/containerd.toml   containerd config (own grpc/ttrpc socket, root, state;
#                                no CRI plugin)
#   DIR/docker/containerd.sock   containerd's socket
#   DIR/docker/daemon.json       dockerd config (vfs, no bridge/iptables, cgroupfs, ulimits,
#                                runtimes.scrun, CDI on)
#   DIR/docker/bin/nvidia-container-runtime-hook   scrun's stub (`scrun-cdi docker-hook`),
#                                first on dockerd's PATH: dockerd offers --gpus only with one
#   DIR/docker/docker.sock       dockerd's socket: DOCKER_HOST=unix://DIR/docker/docker.sock
#   DIR/docker/data  DIR/docker/exec   dockerd --data-root / --exec-root
#   DIR/log/{containerd,dockerd}.log   DIR/run/ourpid.{containerd,dockerd}
#
# dockerd runs the runtime with `--root DIR/docker/exec/runtime-runc/moby`: that is where
# scrun keeps its per-container state for docker.
#
# Idempotent: returns at once when both daemons run with the current config; a changed
# config restarts them (harness/docker-down.sh). Needs the packages (install-deps.sh) and
# the venv (make venv); containers also need the cluster (cluster-up.sh), this does not.
# Stop with harness/docker-down.sh [DIR]. Progress goes to stderr; stdout gets
# `export DOCKER_HOST=...`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "${1:-}"
DK="$D/docker"
# The docker.io client, matching the daemon (a newer client elsewhere on PATH would do too,
# but the tests use this one).
DOCKER=/usr/bin/docker
SOCK="$DK/docker.sock"
export DOCKER_HOST="unix://$SOCK"

log() { echo "[docker-up] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for b in containerd dockerd "$DOCKER"; do
  command -v "$b" >/dev/null 2>&1 || die "$b not found (package docker.io: make deps)"
done
[ -x "$VENV/bin/scrun" ] || die "$VENV/bin/scrun missing (make venv)"
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ] \
  && ! command -v apparmor_parser >/dev/null 2>&1; then
  log "warning: AppArmor is on but apparmor_parser (package apparmor) is missing:" \
    "dockerd cannot load the docker-default profile its containers ask for"
fi
# unix socket paths are limited to 107 bytes (containerd adds ".ttrpc")
[ "${#DK}" -le 80 ] || die "cluster dir path too long for the daemons' sockets: $DK"

mkdir -p "$DK" "$RUN" "$LOG"
chmod 711 "$DK"

# ------------------------------------------------------------------ configs
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# containerd: only what dockerd needs. The CRI plugin is off (it would set up CNI etc.);
# the opt plugin would install into /opt/containerd by default.
cat >"$tmp/containerd.toml" <<EOF
# written by harness/docker-up.sh: containerd for the private dockerd
version = 2
root = "$DK/containerd-root"
state = "$DK/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$DK/containerd.sock"

[ttrpc]
  address = "$DK/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$DK/containerd-opt"
EOF

# dockerd: same ulimits as the podman config (no CAP_SYS_RESOURCE in the sandbox: the
# defaults would fail setrlimit), no bridge, iptables rules or IP forwarding to set up or leave
# behind (tests run with --network none), vfs (works on any filesystem, no mounts),
# cgroupfs (PID 1 may not be systemd). deprecated-key-path: the trust key would go to
# /etc/docker/key.json otherwise. features.cdi: CDI names (`--device nvidia.com/gpu=0`)
# resolve against the login host's marker spec (cluster-up.sh) on docker 25-27 too (on by
# default from 28; 20.10 has no CDI and ignores it). Paths and sockets are flags (below).
nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=1048576
nproc=32768; hu="$(ulimit -Hu)"
[ "$hu" != unlimited ] && [ "$hu" -lt "$nproc" ] && nproc="$hu"
cat >"$tmp/daemon.json" <<EOF
{
  "storage-driver": "vfs",
  "bridge": "none",
  "iptables": false,
  "ip6tables": false,
  "ip-masq": false,
  "ip-forward": false,
  "userland-proxy": false,
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "default-ulimits": {
    "nofile": {"Name": "nofile", "Hard": $nofile, "Soft": $nofile},
    "nproc": {"Name": "nproc", "Hard": $nproc, "Soft": $nproc}
  },
  "deprecated-key-path": "$DK/key.json",
  "features": {"cdi": true},
  "runtimes": {
    "scrun": {"path": "$VENV/bin/scrun"}
  }
}
EOF

# docker's --gpus: dockerd registers its NVIDIA device driver at start when a program named
# nvidia-container-runtime-hook is on its PATH (below); scrun turns the driver's request
# into its job's, as on a site's login host
mkdir -p "$tmp/bin" "$DK/bin"
"$VENV/bin/scrun-cdi" docker-hook --output "$tmp/bin/nvidia-container-runtime-hook"

changed=0
for f in containerd.toml daemon.json bin/nvidia-container-runtime-hook; do
  if ! cmp -s "$tmp/$f" "$DK/$f"; then
    mode=644; [ -x "$tmp/$f" ] && mode=755
    install -m "$mode" "$tmp/$f" "$DK/$f"; changed=1; log "wrote $DK/$f"
  fi
done
if [ "$changed" = 1 ] && { alive "$RUN/ourpid.dockerd" dockerd || alive "$RUN/ourpid.containerd" containerd; }; then
  log "config changed -> restarting the docker daemons"
  "$HARNESS/docker-down.sh" "$D" >&2 || true
fi

# ------------------------------------------------------------------ daemons
# start_daemon <name> <argv...>: setsid, a clean environment (the runtime -- scrun --
# inherits it through containerd's shim; scrun finds the cluster through its site config),
# no inherited descriptors but /dev/null and the log, cwd = DIR.
start_daemon() {
  local name="$1"; shift
  log "starting $name"
  (
    cd "$D"
    for fd in /proc/self/fd/*; do
      fd="${fd##*/}"
      if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid env -i PATH="$DK/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      HOME="${HOME:-/root}" LANG=C.UTF-8 "$@" </dev/null >>"$LOG/$name.log" 2>&1
  ) &
  echo $! >"$RUN/ourpid.$name"
}

docker_answers() { "$DOCKER" --host "$DOCKER_HOST" info --format '{{.ID}}' >/dev/null 2>&1; }

if ! alive "$RUN/ourpid.containerd" containerd; then
  # a dead dockerd's containerd connection is useless: start both afresh
  alive "$RUN/ourpid.dockerd" dockerd && "$HARNESS/docker-down.sh" "$D" >&2
  rm -f "$DK/containerd.sock" "$DK/containerd.sock.ttrpc"
  start_daemon containerd containerd --config "$DK/containerd.toml" --log-level warn
  wait_for 20 test -S "$DK/containerd.sock" \
    || { tail -20 "$LOG/containerd.log" >&2; die "containerd did not start"; }
  alive "$RUN/ourpid.containerd" containerd \
    || { tail -20 "$LOG/containerd.log" >&2; die "containerd exited"; }
fi

started_dockerd=0
if ! alive "$RUN/ourpid.dockerd" dockerd; then
  started_dockerd=1
  rm -f "$SOCK" "$DK/dockerd.pid"
  start_daemon dockerd dockerd --config-file "$DK/daemon.json" -H "unix://$SOCK" \
    --data-root "$DK/data" --exec-root "$DK/exec" --pidfile "$DK/dockerd.pid" \
    --containerd "$DK/containerd.sock" --log-level warn
  if ! wait_for 60 docker_answers; then
    tail -20 "$LOG/dockerd.log" >&2
    die "dockerd not answering on $SOCK"
  fi
  alive "$RUN/ourpid.dockerd" dockerd || { tail -20 "$LOG/dockerd.log" >&2; die "dockerd exited"; }
fi
docker_answers || die "dockerd (pid $(cat "$RUN/ourpid.dockerd")) not answering on $SOCK"
# shellcheck disable=SC2016  # a Go template for docker, not shell expansions
runtimes() { "$DOCKER" info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>&1; }
has_scrun() { case " $(runtimes) " in *" scrun "*) return 0 ;; *) return 1 ;; esac; }
# dockerd 26 (Debian 13) answers once, then refuses connections for a moment while it
# probes its runtimes (`<runtime> features`): poll.
wait_for 20 has_scrun || die "dockerd has no runtime scrun (runtimes: $(runtimes))"
# A dockerd started now runs none of its containers: any it still lists were left by an
# earlier run that was killed, and would be the next test's leftovers.
if [ "$started_dockerd" = 1 ]; then
  stale="$("$DOCKER" ps -aq 2>/dev/null || true)"
  if [ -n "$stale" ]; then
    log "removing containers left by an earlier run: $(echo "$stale" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # one container id a word
    "$DOCKER" rm -f $stale >/dev/null 2>&1 || true
  fi
fi

# ------------------------------------------------------------------ busybox image
# The same rootfs tarball podman-setup.sh imports (built here when podman was skipped).
tarball="$CTR/busybox-rootfs.tar"
if [ ! -s "$tarball" ]; then
  log "building $tarball"
  mkdir -p "$CTR"
  r="$(mktemp -d)"
  "$HARNESS/mkrootfs.sh" "$r"
  tar -C "$r" -cf "$tarball.new" . && mv "$tarball.new" "$tarball"
  rm -rf "$r"
fi
if ! "$DOCKER" image inspect localhost/busybox:latest >/dev/null 2>&1; then
  log "docker import -> localhost/busybox:latest"
  "$DOCKER" import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' \
    "$tarball" localhost/busybox:latest >/dev/null
fi

log "docker up: dockerd $(cat "$RUN/ourpid.dockerd"), containerd $(cat "$RUN/ourpid.containerd"), DOCKER_HOST=$DOCKER_HOST"
printf 'export DOCKER_HOST=%q\n' "$DOCKER_HOST"
