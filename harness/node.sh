#!/usr/bin/env bash
# harness/node.sh DIR NODE -- become compute node NODE of the cluster in DIR, then exec its
# slurmd. cluster-up.sh starts it as
#   unshare --mount --uts --propagation private -- harness/node.sh DIR NODE
# so that the node is another host as far as files go:
#   * its own hostname (= NODE, its NodeName), which its own /etc/hosts resolves
#   * its own, empty /run, /tmp, /var/tmp and /var/lib/containers (tmpfs): the login host's
#     runtime dirs, podman storage (root's under /var/lib/containers, the test users' under
#     /var/tmp) and the cluster dir's other contents (docker's data, pytest's tmp dirs) are
#     out of its sight, as at a site
#   * shared with the login host, as a site shares them: the home directories (untouched),
#     the scratch directory DIR/shared ($SCRUN_SHARED_DIR), and what Slurm itself needs:
#     its config (DIR/etc, read-only), munge's socket and the pid files (DIR/run), the
#     logs (DIR/log) and the slurmd spool dirs (DIR/spool)
# /run/user/<uid> of the users who run jobs is made by cluster-up.sh (node_runtime_dirs),
# as a site's tmpfiles rule or `loginctl enable-linger` would.
# The network stays the login host's (every slurmd on 127.0.0.1, its own port).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "$1"
node="$2"

hostname "$node"

# fake_gpus NODE: this node's GPUs, as gres.conf names them (File=/dev/nvidia[A-B] on the line
# of NodeName=NODE): character devices of NVIDIA's major 195 with the file's numbers as minors
# (another node's minors: the kernel, so the device cgroups, are shared), plus the common
# /dev/nvidiactl (195:255). No driver owns major 195 here, so opening an allowed one fails
# with ENXIO, one the job's device cgroup denies with EPERM, an absent one with ENOENT.
# Beside them, in the node's own /run: the node's CDI spec (/run/cdi/nvidia.json, the shape
# of `nvidia-ctk cdi generate`'s, devices named by their index on the node, 0.., as Slurm's
# SLURM_STEP_GPUS counts them) and the "driver" it names
# (a library directory, a createContainer hook that leaves a mark).
fake_gpus() {
  local node="$1" line first last i work=/mnt sub
  line="$(grep -E "^NodeName=$node Name=gpu " "$ETC/gres.conf" 2>/dev/null || true)"
  [[ "$line" =~ File=/dev/nvidia\[([0-9]+)-([0-9]+)\] ]] || return 0
  first="${BASH_REMATCH[1]}"; last="${BASH_REMATCH[2]}"
  # /dev: an overlay of the host's (its lower layer) with an upper layer of this node's own,
  # then the host's mounts below /dev (pts, shm, mqueue, ...) again on top
  mount -t tmpfs -o mode=700,nosuid "scrun-dev-$node" "$work"
  mkdir "$work/host" "$work/upper" "$work/work"
  mount --rbind /dev "$work/host"
  mount -t overlay -o "lowerdir=/dev,upperdir=$work/upper,workdir=$work/work" "scrun-dev-$node" /dev
  while read -r sub; do
    mkdir -p "/dev/$sub"
    mount --bind "$work/host/$sub" "/dev/$sub"
  done < <(awk -v p="$work/host/" 'index($5, p) == 1 && !seen[$5]++ { print substr($5, length(p) + 1) }' /proc/self/mountinfo)
  umount -l "$work"
  for ((i = first; i <= last; i++)); do mknod -m 666 "/dev/nvidia$i" c 195 "$i"; done
  mknod -m 666 /dev/nvidiactl c 195 255
  # the driver: a library directory and the hook (run by crun, as the job's user)
  local drv=/run/nvidia-driver
  mkdir -p "$drv/lib" "$drv/bin" /run/cdi
  echo "fake libcuda of node $node" >"$drv/lib/libcuda.so.1"
  # the hook leaves its mark in the container's /dev (a tmpfs of the container's own), below
  # the root of the OCI state on its stdin: crun runs createContainer hooks in the container's
  # mount namespace before pivot_root (pid 0 in the state: as crun 1.8) or from outside it
  # (the container's pid: through /proc/<pid>/root). It fails when the container has the
  # annotation fake-gpu-hook=fail (the tests' failing hook).
  cat >"$drv/bin/nvidia-cdi-hook" <<'HOOK'
#!/bin/sh
state="$(tr -d '\n' | sed 's|\\/|/|g')"   # one line, crun 1.28's \/ as /
case "$state" in *'"fake-gpu-hook":"fail"'*|*'"fake-gpu-hook": "fail"'*)
  echo "nvidia-cdi-hook: failing as the container's annotation fake-gpu-hook=fail says" >&2; exit 3 ;;
esac
pid="$(echo "$state" | sed -n 's/.*"pid": *\([0-9]*\).*/\1/p')"
root="$(echo "$state" | sed -n 's/.*"root": *"\([^"]*\)".*/\1/p')"
base="$root"; [ "${pid:-0}" = 0 ] || base="/proc/$pid/root$root"
echo "$1" >"$base/dev/.cdi-hook-mark"
HOOK
  chmod 755 "$drv/bin/nvidia-cdi-hook"
  {
    echo '{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": ['
    for ((i = first; i <= last; i++)); do
      echo "  {\"name\": \"$((i - first))\", \"containerEdits\": {\"deviceNodes\": [{\"path\": \"/dev/nvidia$i\"}]}},"
    done
    echo "  {\"name\": \"all\", \"containerEdits\": {\"deviceNodes\": ["
    for ((i = first; i <= last; i++)); do
      echo "    {\"path\": \"/dev/nvidia$i\"}$([ "$i" = "$last" ] || echo ,)"
    done
    echo '  ]}}],'
    cat <<SPEC
 "containerEdits": {
  "env": ["NVIDIA_VISIBLE_DEVICES=void", "FAKE_GPU_NODE=$node"],
  "deviceNodes": [{"path": "/dev/nvidiactl"}],
  "mounts": [{"hostPath": "$drv/lib", "containerPath": "/usr/local/nvidia/lib", "options": ["ro", "nosuid", "nodev", "bind"]}],
  "hooks": [{"hookName": "createContainer", "path": "$drv/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "$node"]}]
 }
}
SPEC
  } >/run/cdi/nvidia.json
}

# Hold the shared dirs on a scratch mount before the tmpfs mounts hide them (DIR itself
# usually lives under /tmp), then move them back to their own paths.
hold=/mnt
mount -t tmpfs -o mode=700 scrun-node-hold "$hold"
shared=("$ETC" "$RUN" "$LOG" "$SPOOL" "$SHARED")
for i in "${!shared[@]}"; do
  mkdir -p "$hold/$i"
  mount --bind "${shared[$i]}" "$hold/$i"
done
mount -o remount,bind,ro "$hold/0"   # the config: read-only, as an NFS-exported /etc/slurm

for private in /run /tmp /var/tmp /var/lib/containers; do
  mkdir -p "$private"
  case "$private" in
    /run) mode=755 ;;
    /var/lib/containers) mode=700 ;;
    *) mode=1777 ;;
  esac
  mount -t tmpfs -o "mode=$mode,nosuid,nodev" "scrun-$node" "$private"
done
mkdir -p /run/lock /run/user && chmod 1777 /run/lock && chmod 755 /run/user

for i in "${!shared[@]}"; do
  mkdir -p "${shared[$i]}"
  mount --move "$hold/$i" "${shared[$i]}"
done
umount "$hold"

# Fake GPUs (harness/README.md "GPUs"): the node's /dev becomes an overlay of the login host's,
# so the device nodes made below exist on this node only; then its CDI spec and driver files.
fake_gpus "$node"

# The node's name resolves to the address its slurmd binds (127.0.0.1: the network is
# shared): its own /etc/hosts, as each host of a site has.
{ echo "127.0.0.1 $node"; cat /etc/hosts; } >/run/hosts
mount --bind /run/hosts /etc/hosts

# slurmstepd inherits slurmd's cwd: one that exists on the node
cd /
exec slurmd -D -N "$node" -f "$ETC/slurm.conf"
