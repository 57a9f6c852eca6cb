#!/usr/bin/env bash
# bench/layouts.sh -- what staging costs: `podman run --rm localhost/busybox true` through
# scrun in the two layouts a site can choose, against crun, in one run (interleaved rounds):
#   staged   the cluster's own: podman's storage is the login host's, scrun.lua
#            (docs/scrun-lua/shared-scratch.lua) copies each container to the shared dir
#            and back
#   shared   no scrun.lua: podman's storage itself on the shared dir (vfs, plain
#            directories; its runroot too), which the nodes read as it is
# crun runs each layout's storage on the login host. Needs the cluster's exports.
set -euo pipefail
. "$(dirname "$0")/lib.sh"  # the cluster's environment, without the harness's SCRUN_*
out="$(mktemp -d)"
shared="$(realpath "$(dirname "$BENCH_BUNDLE")/..")/bench"   # in the shared dir: the nodes see it
trap 'rm -rf "$out"' EXIT

# a site without scrun.lua
site="$out/site"
make_site "$site"

# the runroot too: podman keeps the files it bind-mounts (/run/.containerenv, hosts, ...)
# there, and remembers its path in the store (at most 50 characters)
storage=(--root "$shared/root" --runroot "$shared/run" --storage-driver vfs)
if ! podman "${storage[@]}" image exists localhost/busybox; then
  podman "${storage[@]}" import --quiet --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' \
    "$(dirname "$CONTAINERS_CONF")/busybox-rootfs.tar" localhost/busybox >/dev/null
fi
shared_podman="env CONTAINERS_CONF=$site/containers.conf podman ${storage[*]}"

rounds "$out/layouts.json" -w 1 -- \
  "podman --runtime scrun run --rm localhost/busybox true" \
  "podman --runtime crun run --rm localhost/busybox true" \
  "$shared_podman --runtime scrun run --rm localhost/busybox true" \
  "$shared_podman --runtime crun run --rm localhost/busybox true"

python3 - "$out/layouts.json" <<'PY'
import json, statistics, sys
staged, crun, shared, shared_crun = (
    statistics.median(r["times"]) * 1000 for r in json.load(open(sys.argv[1]))["results"]
)
print(f"staged (scrun.lua into the shared dir): scrun {staged:.0f} ms, crun {crun:.0f} ms: "
      f"{staged / crun:.2f}x")
print(f"shared storage (vfs, no scrun.lua):    scrun {shared:.0f} ms, crun {shared_crun:.0f} ms: "
      f"{shared / shared_crun:.2f}x")
print(f"staging costs {staged - shared:.0f} ms a container (stage-in and stage-out)")
PY
podman "${storage[@]}" rm -af >/dev/null 2>&1 || true
nothing_left
