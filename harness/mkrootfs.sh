#!/usr/bin/env bash
# harness/mkrootfs.sh DIR -- a minimal busybox-static root filesystem in DIR
# (used for the Slurm test bundle and for the podman image).
set -euo pipefail
R="$1"
BB="${BUSYBOX:-/bin/busybox}"
mkdir -p "$R"/{bin,dev,etc,proc,root,sys,tmp}
cp "$BB" "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"
done
chmod 1777 "$R/tmp"
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
