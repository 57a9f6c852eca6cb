#!/usr/bin/env bash
# harness/cluster-up.sh [DIR] -- bring up the project's private test cluster:
# munged + slurmctld on this host (the login host) and compute nodes n1, n2 that are other
# hosts as far as files go: each slurmd in its own mount and UTS namespaces (harness/node.sh:
# own hostname, own /run, /tmp, /var/tmp, /var/lib/containers; shared with the login host
# only the homes, the scratch dir DIR/shared and what Slurm needs). Slurm 22.05 or 24.11,
# all as root on 127.0.0.1, no systemd, no accounting; container support through oci.conf ->
# crun; podman with a private containers.conf and a local busybox image (no registry), and
# docs/scrun-lua/shared-scratch.lua beside slurm.conf, staging containers into DIR/shared.
#
# DIR: first argument, else $SCRUN_CLUSTER_DIR, else /tmp/scrun-cluster.
# Env knobs (all optional):
#   SLURMCTLD_PORT (6817)  SLURMD_PORT (6818; node nK listens on SLURMD_PORT+K-1)
#   SLURM_NODES (2)        compute nodes n1..nK, each its own `slurmd -N nK` in its own
#                          namespaces, so tests can run 2-node jobs
#   SLURM_NODE_CPUS (8)    CPUs advertised per node (more than real is allowed)
#   SLURM_NODE_GPUS (2)    fake GPUs per node (harness/node.sh): node nK's are /dev/nvidia<N>,
#                          N = (K-1)*GPUS ... K*GPUS-1; 0: no GPUs
#   SLURM_NODE_MEMORY (8192)  MB of memory per node (RealMemory; a job gets 1/16 unless it asks)
#   SCRUN_TEST_USER, SCRUN_TEST_USER2  the two unprivileged test users (default scruntest,
#                          scruntest2; made by harness/test-users.sh)
#   SKIP_APT=1             never run apt-get (fail later if something is missing)
#   SKIP_PODMAN=1          skip the podman part
#   SCRUN_OWN_SLURM=1      Slurm is not Debian's packages (a site's own build): the
#                          srun, slurmctld, slurmd first on PATH are used
#
# Idempotent: a re-run with the same config changes nothing and returns in well under
# a second; a changed config restarts the daemons. Progress goes to stderr; stdout gets
# the `export ...` lines (same as harness/env.sh), also written to DIR/env.sh.
# Layout: DIR/etc (slurm.conf cgroup.conf oci.conf plugstack.conf scrun.lua munge.key)
#         DIR/log  DIR/run (pid files, munge socket)  DIR/state  DIR/spool/<node>
#         DIR/shared (the nodes' shared scratch: SCRUN_SHARED_DIR; bundles/busybox)
#         DIR/containers (containers.conf, rootfs tarball)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "${1:-}"

NODE="$(hostname -s)"
CPUS="${SLURM_NODE_CPUS:-8}"
NODE_MEMORY="${SLURM_NODE_MEMORY:-8192}"   # limits: MB per node (RealMemory)
CTLD_PORT="${SLURMCTLD_PORT:-6817}"
SLURMD_PORT="${SLURMD_PORT:-6818}"
NODES="${SLURM_NODES:-2}"
GPUS="${SLURM_NODE_GPUS:-2}"

log() { echo "[cluster-up] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ------------------------------------------------------------------ packages
"$HARNESS/install-deps.sh"

# ------------------------------------------------------------------ dirs
mkdir -p "$ETC" "$LOG" "$RUN/munge" "$STATE" "$SPOOL" "$SHARED"
chmod 755 "$D" "$ETC" "$LOG" "$RUN" "$STATE" "$SPOOL"
chmod 755 "$RUN/munge"    # munged refuses a group/other-writable socket dir
chmod 1777 "$SHARED"      # every user stages into it (like a site's /scratch)
# the old shared-everything layout's dirs (crun roots, bundles): not used any more
rm -rf "$D/oci" "$D/bundles"
# job users (uid != 0) must be able to traverse every parent of DIR
p="$D"; while [ "$p" != / ]; do p="$(dirname "$p")"; [ -x "$p" ] || chmod o+x "$p"; done

# ------------------------------------------------------------------ munge key
# Our own key and socket: never the system munged's.
if [ ! -s "$ETC/munge.key" ]; then
  log "generating munge key $ETC/munge.key"
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile="$ETC/munge.key" --force >&2
  else
    dd if=/dev/urandom of="$ETC/munge.key" bs=1 count=1024 status=none
  fi
fi
chown root:root "$ETC/munge.key"; chmod 400 "$ETC/munge.key"

# ------------------------------------------------------------------ test bundle
# Tiny OCI bundle: busybox-static rootfs + a `crun spec --rootless`-like config without
# terminal and without a network namespace. Slurm 22.05 always uses <bundle>/rootfs
# (it overwrites root.path) and needs an ABSOLUTE bundle path in --container.
if [ ! -x "$BUNDLE/rootfs/bin/busybox" ] || [ ! -s "$BUNDLE/config.json" ]; then
  [ -x /bin/busybox ] || die "/bin/busybox missing (package busybox-static)"
  log "building OCI bundle $BUNDLE"
  rm -rf "$BUNDLE"
  "$HARNESS/mkrootfs.sh" "$BUNDLE/rootfs"
  cat >"$BUNDLE/config.json.new" <<'EOF'
{
  "ociVersion": "1.0.0",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["sh", "-c", "echo hi"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
    "cwd": "/",
    "capabilities": {
      "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "effective": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "inheritable": [],
      "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
      "ambient": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    },
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": true},
  "hostname": "busybox",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
  ],
  "linux": {
    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
    "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "user"}, {"type": "mount"}],
    "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
  }
}
EOF
  mv "$BUNDLE/config.json.new" "$BUNDLE/config.json"   # written last: marks the bundle complete
  chmod -R a+rX "$SHARED/bundles"
fi

# ------------------------------------------------------------------ configs
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

nodes_conf=""
all_nodes=""
node_gres=""; [ "$GPUS" = 0 ] || node_gres=" Gres=gpu:$GPUS"
for ((i = 1; i <= NODES; i++)); do
  # Every slurmd binds 127.0.0.1 (the network is the login host's), each its own port
  # (127.0.0.2 etc. did not work).
  nodes_conf+="NodeName=n$i NodeHostname=n$i NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + i - 1)) CPUs=$CPUS$node_gres State=UNKNOWN"$'\n'
  all_nodes+="${all_nodes:+,}n$i"
done

# gres.conf: each node's fake GPUs (harness/node.sh makes them, and the node's CDI spec, from
# its line here); other minors on each node, as the nodes share one kernel and its device cgroups
{
  echo "# generated by harness/cluster-up.sh: fake GPUs (major 195, no driver), see harness/node.sh"
  for ((i = 1; i <= NODES && GPUS > 0; i++)); do
    echo "NodeName=n$i Name=gpu File=/dev/nvidia[$(((i - 1) * GPUS))-$((i * GPUS - 1))]"
  done
} >"$tmp/gres.conf"

# No JobCompType, SwitchType: their defaults are "none" on every version, and Slurm 24.11
# has no */none plugin to name for them (naming one is fatal there).
# slurmdbd and its MariaDB (harness/accounting.sh) listen on DBD_PORT and MARIADB_PORT
accounting_ports
cat >"$tmp/slurm.conf" <<EOF
# generated by harness/cluster-up.sh -- test cluster: slurmctld on this (login) host, compute
# nodes in namespaces of their own (harness/node.sh)
# the nodes are made by node.sh $(sha1sum <"$HARNESS/node.sh" | cut -c1-12) (another: they are made again)
ClusterName=scrun
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$ETC/plugstack.conf
GresTypes=gpu
# limits: cgroup task and process tracking (cgroup.conf says what is constrained)
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup
# memory is consumable (CR_Core_Memory below): the job's share is its cgroup's limit; a job
# that does not ask (--mem) gets DefMemPerNode, so 16 of them fit on a node
NodeName=DEFAULT RealMemory=$NODE_MEMORY
DefMemPerNode=$((NODE_MEMORY / 16))
# accounting: job records in slurmdbd (with the comment: scrun:<container id>); a job
# needs an association of its user
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCK
AccountingStorageEnforce=associations
AccountingStoreFlags=job_comment
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
Waittime=0
MailProg=/bin/true
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldTimeout=60
SlurmdTimeout=300
${nodes_conf}PartitionName=debug Nodes=$all_nodes Default=YES MaxTime=INFINITE State=UP
PartitionName=second Nodes=$all_nodes MaxTime=INFINITE State=UP
EOF

# slurmd 22.05 always initialises a cgroup plugin (even with linuxproc + task/none):
# pin the version that is mounted and never talk to systemd (PID 1 may not be systemd).
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then CG=cgroup/v2; else CG=cgroup/v1; fi
cat >"$tmp/cgroup.conf" <<EOF
CgroupPlugin=$CG
IgnoreSystemd=yes
ConstrainRAMSpace=yes
ConstrainCores=yes
ConstrainDevices=yes
EOF

: >"$tmp/plugstack.conf"

# oci.conf (22.05 keys only: a 23.02+ key makes every container step fatal).
# slurmstepd runs each pattern as `/bin/sh -c <pattern>` as the job user.
#  * RunTimeRun uses `exec`: otherwise sh stays the task, dies on scancel's SIGTERM, crun
#    is re-parented to init and escapes proctrack's SIGKILL -> the node stays COMPLETING
#    for ~60 s and the container leaks.
#  * RunTimeQuery prints {} once the container is gone, so slurmstepd's cleanup does not
#    print "_try_parse: JSON parsing error" (into the job's output file for batch jobs).
#  * a literal % must be written %% (an unknown %X is fatal in slurmstepd).
#  * crun's --root is per user, the node's /run/user/<uid>/crun (%U is not a 22.05 pattern;
#    the shell's $(id -u %u) is), so one user's container state is out of another's reach.
#    Not $(id -u): Slurm 24.11 runs the step cleanup (Query, Kill, Delete) as root.
#  * Query, Kill and Delete act on EVERY container of the step when the task id is -1:
#    Slurm 24.11 runs its step cleanup only with task id -1 (22.05 also with the real
#    ones), so `crun state <name>.-1` finds nothing, Delete is never run, and a container
#    killed by scancel or its time limit (crun SIGKILLed with it) stays behind in the
#    runtime root as `stopped`. The container name keeps %t: 24.11 may run several
#    container tasks per node.
#  * They go by the runtime root's directories, not `crun list`: a step killed while crun
#    was still creating the container leaves a directory without crun's status file, which
#    `crun list`/`state`/`delete` do not handle. At cleanup nothing of the step runs any
#    more, so Query removes such a directory, and Delete removes what crun cannot delete.
R="/run/user/\$(id -u %u)/crun"
# limits: --cgroup-manager=disabled keeps the container in Slurm's task cgroup; crun run by
# root otherwise makes a cgroup of its own (/<container name>) and escapes the job's limits
C="crun --rootless=true --cgroup-manager=disabled --root=$R"
# each: the step's containers that this call is about, as \$c (sh code)
each="s=%n.%u.%j.%s. t=%t; for c in \$(ls $R 2>/dev/null); do case \$t:\$c in -1:\$s*|*:\$s\$t)"
# scrun-cdi-run (this checkout's, as a site installs it on its nodes) gives the step's
# container the devices, mounts, environment and hooks of the node's CDI spec for the GPUs
# Slurm allocated, then runs crun and keeps its exit code where an OOM kill hides it from
# Slurm (scrunlib.exit_record). Slurm 22.05 tells the runtime nothing of the GPUs: it asks
# the job's record (--job, --node). The nodes may not see this checkout (a clone under /tmp:
# each node has a /tmp of its own), so they run a copy in DIR/etc, which every node sees,
# with the system's python3 (scrun-cdi-run needs only the standard library).
cdi_dir="$ETC/scrun-cdi"
rm -rf "$cdi_dir.new" && mkdir -p "$cdi_dir.new"
cp -r "$REPO/shared/scrunlib" "$REPO/tools/scrun-cdi/scrun_cdi" "$cdi_dir.new/"
find "$cdi_dir.new" -name __pycache__ -prune -exec rm -rf {} +
/usr/bin/python3 -m compileall -q "$cdi_dir.new"  # the nodes run this host's python3: compiled once
cat >"$cdi_dir.new/scrun-cdi-run" <<EOF
#!/bin/sh
# scrun-cdi-run, as cluster-up.sh copied it from $REPO
exec /usr/bin/python3 -I -c 'import sys; sys.path.insert(0, "$cdi_dir"); from scrun_cdi.main import main; sys.exit(main())' "\$@"
EOF
chmod -R a+rX "$cdi_dir.new" && chmod 755 "$cdi_dir.new/scrun-cdi-run"
rm -rf "$cdi_dir" && mv "$cdi_dir.new" "$cdi_dir"
run_wrapper="$cdi_dir/scrun-cdi-run --bundle %b"
if [ "$GPUS" != 0 ]; then
  case "$(SLURM_CONF="$tmp/slurm.conf" srun --version)" in *" 22."*) run_wrapper+=" --job %j --node %n" ;; esac
fi
run_wrapper+=" -- "
cat >"$tmp/oci.conf" <<EOF
RunTimeQuery="$each $C state \$c 2>/dev/null && exit 0; rm -rf $R/\$c;; esac; done; echo {}"
RunTimeKill="$each $C kill -a \$c KILL 2>/dev/null;; esac; done; true"
RunTimeDelete="$each $C delete --force \$c 2>/dev/null || rm -rf $R/\$c;; esac; done; true"
RunTimeRun="exec $run_wrapper$C run --bundle %b %n.%u.%j.%s.%t"
EOF

# scrun.lua: docs/scrun-lua/shared-scratch.lua with `scratch` set to the shared scratch dir,
# as a site installs it: podman's and docker's bundles, which only this host sees, reach
# the nodes through it.
sed "s|^local scratch = \"/scratch\"\$|local scratch = \"$SHARED\"|" \
  "$REPO/docs/scrun-lua/shared-scratch.lua" >"$tmp/scrun.lua"
grep -q "^local scratch = \"$SHARED\"\$" "$tmp/scrun.lua" || die "docs/scrun-lua/shared-scratch.lua: no scratch line"

changed=0
for f in slurm.conf gres.conf cgroup.conf plugstack.conf oci.conf scrun.lua; do
  if ! cmp -s "$tmp/$f" "$ETC/$f"; then
    install -m 644 "$tmp/$f" "$ETC/$f"; log "wrote $ETC/$f"
    # scrun reads scrun.lua at each create; the daemons never do
    [ "$f" = scrun.lua ] || changed=1
  fi
done
export SLURM_CONF="$ETC/slurm.conf"

if [ "$changed" = 1 ] && { alive "$RUN/ourpid.slurmctld" slurmctld || alive "$RUN/ourpid.munged" munged; }; then
  log "config changed -> restarting daemons"
  "$HARNESS/cluster-down.sh" "$D" >&2 || true
fi

# Daemons start from the cluster dir, not the caller's cwd: slurmstepd inherits slurmd's
# cwd, and a caller's directory that later disappears breaks every step's getcwd().
cd "$D"

# ------------------------------------------------------------------ munged
if ! alive "$RUN/ourpid.munged" munged; then
  rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
  log "starting munged"
  setsid munged -F --force --socket="$MUNGE_SOCK" --key-file="$ETC/munge.key" \
    --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
    --seed-file="$RUN/munged.seed" </dev/null >>"$LOG/munged.out" 2>&1 &
  echo $! >"$RUN/ourpid.munged"
  wait_for 10 test -S "$MUNGE_SOCK" || { tail "$LOG/munged.log" >&2; die "munged did not start"; }
fi
chmod 755 "$RUN/munge"; chmod 777 "$MUNGE_SOCK" 2>/dev/null || true
munge --socket="$MUNGE_SOCK" -n </dev/null | unmunge --socket="$MUNGE_SOCK" >/dev/null \
  || die "munge self-test failed"

# ------------------------------------------------------------------ slurmdbd
# slurmctld needs slurmdbd (and its cluster record) from its first start
"$HARNESS/accounting.sh" daemons "$D"

# ------------------------------------------------------------------ slurmctld
if ! alive "$RUN/ourpid.slurmctld" slurmctld; then
  log "starting slurmctld (port $CTLD_PORT)"
  setsid slurmctld -D -f "$ETC/slurm.conf" </dev/null >>"$LOG/slurmctld.out" 2>&1 &
  echo $! >"$RUN/ourpid.slurmctld"
  wait_for 30 scontrol ping || { tail -20 "$LOG/slurmctld.log" >&2; die "slurmctld not responding"; }
  # A ping could also be answered by some other cluster on the same port: ours must live.
  sleep 0.2
  alive "$RUN/ourpid.slurmctld" slurmctld \
    || { tail -20 "$LOG/slurmctld.out" "$LOG/slurmctld.log" >&2; die "slurmctld exited (port $CTLD_PORT busy?)"; }
  # Jobs slurmctld recovered from its state were running when the cluster was stopped
  # (killed with the session that ran them): no process of theirs is left. End them, or
  # they would be the next test's leftovers.
  stale="$(squeue -h -o %i 2>/dev/null || true)"
  if [ -n "$stale" ]; then
    log "cancelling jobs recovered from an earlier run: $(echo "$stale" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # one job id a word
    scancel $stale || true
  fi
fi

# ------------------------------------------------------------------ slurmd(s)
# Each node in namespaces of its own (harness/node.sh): a node that starts has an empty
# /run, so no crun state of an earlier run is left on it.
# Slurm's cgroup v1 trees (/sys/fs/cgroup/<controller>/slurm_<node>/uid_U/job_J/step_S)
# are the machine's, not the root's: node nK of every platform uses the same ones. A step
# whose slurmstepd was killed (a test does so on purpose) leaves its job's cgroups behind,
# and a later job of the same id (each platform counts job ids from 1) then fails to launch
# on that node: its write of job_J/cpuset.cpus gets EBUSY while the stale step_S below holds
# other CPUs ("Slurmd could not execve job"). A node that is not running owns none of them:
# remove the empty ones, deepest first (rmdir refuses a cgroup that still has processes).
remove_stale_cgroups() { # remove_stale_cgroups <nodename>
  local tree
  for tree in /sys/fs/cgroup/*/"slurm_$1"; do
    [ -d "$tree" ] || continue
    find "$tree" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}
start_slurmd() { # start_slurmd <nodename>
  local n="$1"
  mkdir -p "$SPOOL/$n"
  if ! alive "$RUN/ourpid.slurmd-$n" slurmd; then
    remove_stale_cgroups "$n"
    log "starting node $n (slurmd -N $n in its own mount and UTS namespaces)"
    setsid unshare --mount --uts --propagation private -- "$HARNESS/node.sh" "$D" "$n" \
      </dev/null >>"$LOG/slurmd-$n.out" 2>&1 &
    echo $! >"$RUN/ourpid.slurmd-$n"
  fi
}
for ((i = 1; i <= NODES; i++)); do start_slurmd "n$i"; done

node_ready() {
  local st; st="$(sinfo -h -N -n "$1" -o %t 2>/dev/null | head -1)"
  case "$st" in
    idle|mix|mixed|alloc|allocated|comp) return 0 ;;
    # DOWN comes back through ReturnToService=2; a DRAIN from an earlier run
    # ("Kill task failed" etc.) does not, so resume it.
    drain|drng|drained|draining|down|fail|failg)
      scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1; return 1 ;;
    *) return 1 ;;
  esac
}
for n in ${all_nodes//,/ }; do
  if ! wait_for 60 node_ready "$n"; then
    log "node $n not ready: $(sinfo -h -N -n "$n" -o '%t %E' 2>&1)"
    tail -20 "$LOG/slurmd-$n.log" >&2 || true
    die "node $n did not become idle"
  fi
done
log "slurm up: $(sinfo -h -o '%P %a %D %t %N' | tr '\n' ';')"

# ------------------------------------------------------------------ podman, test users
[ "${SKIP_PODMAN:-0}" = 1 ] || "$HARNESS/podman-setup.sh" "$D"
"$HARNESS/test-users.sh" "$D"
"$HARNESS/accounting.sh" associations "$D"   # accounting: root and the test users

# /run/user/<uid> on every node for root and the test users (crun's --root is below it)
test_users=(root)
for f in "$ETC/test-user" "$ETC/test-user2"; do [ -s "$f" ] && test_users+=("$(cat "$f")"); done
while read -r n pid; do
  for u in "${test_users[@]}"; do
    node_runtime_dir "$pid" "$u" || die "node $n: cannot make /run/user of $u"
  done
done < <(node_pids)

# ------------------------------------------------------------------ scrun site config
# podman runs the runtime with an almost empty environment (no SLURM_CONF, sometimes no
# PATH), so scrun reads <sys.prefix>/etc/scrun/scrun.toml; for the venv that is here.
if [ -x "$VENV/bin/python" ]; then
  mkdir -p "$VENV/etc/scrun"
  cat >"$tmp/scrun.toml" <<EOF
# written by harness/cluster-up.sh for the test cluster in $D
slurm_conf = "$ETC/slurm.conf"
bin_dir = "$(dirname "$(command -v srun)")"
# oci.conf's RunTimeQuery here is a loop over the step's containers: say how exec enters one,
# through the nodes' scrun-cdi-run as RunTimeRun (a program crun cannot start: 127, 126)
exec_command = "$cdi_dir/scrun-cdi-run -- crun --rootless=true --root=/run/user/\$(id -u)/crun exec %o %n.%u.%j.%s.%t"
EOF
  if ! cmp -s "$tmp/scrun.toml" "$VENV/etc/scrun/scrun.toml"; then
    install -m 644 "$tmp/scrun.toml" "$VENV/etc/scrun/scrun.toml"
    log "wrote $VENV/etc/scrun/scrun.toml"
  fi
fi

# ------------------------------------------------------------------ the engines' GPU options
# The login host's marker spec, as a site installs it (docs/site-guide.md, "GPUs"): podman's
# and docker's `--device nvidia.com/gpu=…` (podman 5's `--gpus`) resolve to it instead of
# failing in the engine, and scrun refuses them in one line. Removed by cluster-down.sh.
if [ "$GPUS" != 0 ] && [ -x "$VENV/bin/scrun-cdi" ]; then
  mkdir -p "$(dirname "$LOGIN_CDI_SPEC")"
  "$VENV/bin/scrun-cdi" login-spec --output "$LOGIN_CDI_SPEC" || die "scrun-cdi login-spec failed"
fi

# ------------------------------------------------------------------ exports
"$HARNESS/env.sh" "$D" >"$tmp/env.sh"
install -m 644 "$tmp/env.sh" "$D/env.sh"
cat "$D/env.sh"
log "cluster ready in $D (eval \"\$(make -s env)\" to use it)"
