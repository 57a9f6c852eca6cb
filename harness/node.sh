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

# The node's name resolves to the address its slurmd binds (127.0.0.1: the network is
# shared): its own /etc/hosts, as each host of a site has.
{ echo "127.0.0.1 $node"; cat /etc/hosts; } >/run/hosts
mount --bind /run/hosts /etc/hosts

# slurmstepd inherits slurmd's cwd: one that exists on the node
cd /
exec slurmd -D -N "$node" -f "$ETC/slurm.conf"
