# shellcheck shell=bash disable=SC2034  # the layout variables are for the sourcing scripts
# harness/lib.sh -- sourced by the harness scripts (not executable on its own).
# One place for the cluster layout, so cluster-up, cluster-down and env.sh agree.
#
#   cluster_paths [DIR]   sets D ETC LOG RUN STATE SPOOL SHARED MUNGE_SOCK BUNDLE CTR
#                         REPO VENV (DIR default: $SCRUN_CLUSTER_DIR or /tmp/scrun-cluster)
#   LOGIN_CDI_SPEC        the login host's GPU marker spec (`scrun-cdi login-spec`): podman
#                         and docker read /etc/cdi and /var/run/cdi; the nodes, each with a
#                         /run of its own, do not see this one

HARNESS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(dirname "$HARNESS")"
VENV="$REPO/.venv"
LOGIN_CDI_SPEC=/run/cdi/scrun-gpu.json
# Daemons live in sbin; CI and `su -` shells do not always have it on PATH.
case ":$PATH:" in *":/usr/sbin:"*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
export PATH

cluster_paths() {
  D="${1:-${SCRUN_CLUSTER_DIR:-/tmp/scrun-cluster}}"
  mkdir -p "$D"
  D="$(cd "$D" && pwd -P)"
  ETC="$D/etc"; LOG="$D/log"; RUN="$D/run"; STATE="$D/state"; SPOOL="$D/spool"
  SHARED="$D/shared"                     # the scratch filesystem the nodes share
  MUNGE_SOCK="$RUN/munge/munge.socket.2"
  BUNDLE="$SHARED/bundles/busybox"       # ready-made OCI bundle for srun --container
  CTR="$D/containers"                    # private podman config (containers.conf)
}

# accounting_ports: DBD_PORT (slurmdbd) and MARIADB_PORT (its database), by default
# SLURMCTLD_PORT+10 and +11: clear of every cluster's slurmctld and slurmd ports (+1..+3)
accounting_ports() {
  local ctld="${SLURMCTLD_PORT:-6817}"
  DBD_PORT="${SLURMDBD_PORT:-$((ctld + 10))}"
  MARIADB_PORT="${SCRUN_MARIADB_PORT:-$((ctld + 11))}"
}

# alive <pidfile> <cmdline-substring>: is the recorded pid still OUR daemon?
# (a pid can be reused, so the command line is checked too)
alive() {
  local pf="$1" want="$2" pid
  [ -s "$pf" ] || return 1
  pid="$(cat "$pf")"
  [ -d "/proc/$pid" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$want"
}

# running <pid>: exists and is not a zombie (an unreaped zombie is as good as gone)
running() {
  local st; st="$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)"
  [ -n "$st" ] && [ "$st" != Z ]
}

# stop_pidfile <pidfile> <cmdline-substring>: stop the recorded daemon if it is still
# ours (TERM, KILL after 10 s), and forget it
stop_pidfile() {
  local pf="$1" want="$2" pid
  [ -s "$pf" ] || { rm -f "$pf"; return 0; }
  pid="$(cat "$pf")"
  if alive "$pf" "$want"; then
    echo "[stop] stopping $want (pid $pid)" >&2
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      echo "[stop] $want pid $pid still alive after 10 s, SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
      for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$pf"
}

# wait_for <seconds> <cmd...>: poll every 0.1 s until cmd succeeds.
wait_for() {
  local n=$(($1 * 10)); shift
  while ! "$@" >/dev/null 2>&1; do
    n=$((n - 1)); [ $n -gt 0 ] || return 1
    sleep 0.1
  done
}

# containers_conf HEADER: the containers.conf of the tests' podman (root's, through
# CONTAINERS_CONF, and the test users' rootless ones), registering this checkout's scrun.
# * default_ulimits: without CAP_SYS_RESOURCE, podman's default nofile/nproc of 1048576
#   make crun fail ("setrlimit RLIMIT_NOFILE: Operation not permitted"): ask for what
#   this machine allows.
# * netns=host: no bridge and no firewall rules to set up or leave behind.
# * runtime_supports_nocgroup is SINGULAR in podman 4.3 (the documented plural key is
#   rejected: "Failed to decode the keys").
# * runtime_supports_json: "scrun" gets --log-format=json --log <file>, like crun.
# * network_backend: podman guesses otherwise, and on a new install it guessed CNI
#   (whose plugins are not installed) and warned on every command.
containers_conf() {
  local nofile nproc hu
  nofile="$(ulimit -Hn)"; [ "$nofile" = unlimited ] && nofile=1048576
  nproc=32768; hu="$(ulimit -Hu)"
  [ "$hu" != unlimited ] && [ "$hu" -lt "$nproc" ] && nproc="$hu"
  cat <<EOF
$1
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
netns = "host"

[network]
network_backend = "netavark"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime_supports_json = ["crun", "runc", "scrun"]
runtime_supports_nocgroup = ["crun", "scrun"]

[engine.runtimes]
scrun = ["$VENV/bin/scrun"]
EOF
}

# node_pids: "NODE PID" of each running compute node (slurmd in its own namespaces,
# harness/node.sh); needs cluster_paths.
node_pids() {
  local pf n
  for pf in "$RUN"/ourpid.slurmd-*; do
    [ -e "$pf" ] || continue
    n="${pf##*/ourpid.slurmd-}"
    alive "$pf" slurmd && echo "$n $(cat "$pf")"
  done
}

# node_runtime_dir PID USER: /run/user/<uid> of USER on the node whose slurmd is PID, owned
# by the user, 0700, as a site's tmpfiles rule or `loginctl enable-linger` makes it
# (crun's --root in oci.conf is below it). Idempotent.
node_runtime_dir() {
  local pid="$1" user="$2" uid gid
  uid="$(id -u "$user")"; gid="$(id -g "$user")"
  nsenter --target "$pid" --mount -- install -d -m 700 -o "$uid" -g "$gid" "/run/user/$uid"
}
