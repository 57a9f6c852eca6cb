#!/usr/bin/env bash
# harness/mkrootfs.sh DIR -- a minimal busybox-static root filesystem in DIR
# (used for the Slurm test bundle and for the podman image).
set -euo pipefail
R="$1"
BB="${BUSYBOX:-/bin/busybox}"
mkdir -p "$R"/{bin,dev,etc,proc,root,sys,tmp,usr}
cp "$BB" "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"
done
# /usr/bin, /usr/sbin and /sbin lead to /bin, as in a merged-/usr image (Debian's, Ubuntu's):
# Slurm 24.11's slurmstepd resolves a bare command name against the NODE's PATH and files
# (`true` becomes /usr/bin/true on a merged-/usr node) before the runtime sees it, so a
# /bin-only rootfs fails plain `srun --container <bundle> true` there (22.05 does not).
ln -sfn ../bin "$R/usr/bin"; ln -sfn ../bin "$R/usr/sbin"; ln -sfn bin "$R/sbin"
chmod 1777 "$R/tmp"
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
