#!/usr/bin/env bash
# bench/images.sh -- what a container's image size costs: `podman run --rm IMAGE true` of
# busybox and of busybox plus 0.5 GiB and 2 GiB of random data (built here, once: no registry),
# each run twice in a row (first: with scrun.lua's image cache emptied; second: cached),
# through crun and through scrun with the cluster's scrun.lua, in BENCH_ROUNDS interleaved
# rounds; and the shared scratch's growth while one container of each image runs. Ratios are
# within one run; the median and the spread (min-max) of the rounds are printed.
# Usage: bash bench/images.sh (after `eval "$(make -s env)"`; BENCH_ROUNDS, default 3;
# BENCH_IMAGE_SIZES in MiB, default "512 2048").
set -euo pipefail
BENCH_ROUNDS="${BENCH_ROUNDS:-3}"
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
SIZES="${BENCH_IMAGE_SIZES:-512 2048}"
SCRATCH="$(sed -n 's/^local scratch = "\(.*\)"$/\1/p' "$(dirname "$SLURM_CONF")/scrun.lua")"
[ -n "$SCRATCH" ] || { echo "bench: the cluster's scrun.lua names no scratch" >&2; exit 1; }
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# localhost/bench-opt-<size>m: busybox plus <size> MiB of random data in /opt/data (kept
# between runs). In a directory, as a real image holds its files: a top-level file of an
# image is copied for each container by the image cache (docs/site-guide.md).
image_of() {
  local size="$1" name="localhost/bench-opt-${1}m"
  if ! podman image exists "$name"; then
    local dir
    dir="$(mktemp -d)"
    head -c "$((size * 1024 * 1024))" /dev/urandom >"$dir/data"
    printf 'FROM localhost/busybox\nCOPY data /opt/data\n' >"$dir/Containerfile"
    podman build -q -t "$name" "$dir" >/dev/null
    rm -rf "$dir"
  fi
  echo "$name"
}

# seconds of one `podman run --rm IMAGE true` through RUNTIME. Each timed part starts with
# nothing left to write back (sync): the one before it may have left gigabytes, whose
# writeback would slow whichever part came next.
one_run() {
  local runtime="$1" image="$2" start end
  sync
  start="$(date +%s.%N)"
  podman --runtime "$runtime" run --rm "$image" true
  end="$(date +%s.%N)"
  awk "BEGIN {print $end - $start}"
}

# median and min-max of the numbers on stdin
summary() { sort -g | awk '{v[NR]=$1} END {printf "%.2f (%.2f-%.2f)", v[int((NR+1)/2)], v[1], v[NR]}'; }

images=(localhost/busybox)
for size in $SIZES; do images+=("$(image_of "$size")"); done
for round in $(seq "$BENCH_ROUNDS"); do
  echo "-- round $round of $BENCH_ROUNDS"
  for image in "${images[@]}"; do
    tag="$(basename "$image")"
    for runtime in crun scrun; do
      # first: the image not in scrun.lua's image cache (shared-scratch.lua's)
      rm -rf "${SCRATCH:?}/$(id -u)/scrun-cache"
      one_run "$runtime" "$image" >>"$OUT/$tag.$runtime.first"
      one_run "$runtime" "$image" >>"$OUT/$tag.$runtime.second"
    done
    # a plain copy of the image's root filesystem into the scratch: what staging it once costs
    id="$(podman create "$image" true)"
    root="$(podman mount "$id")"
    sync
    start="$(date +%s.%N)"
    cp -a "$root" "$SCRATCH/bench-copy"
    end="$(date +%s.%N)"
    rm -rf "$SCRATCH/bench-copy"
    podman umount "$id" >/dev/null
    podman rm "$id" >/dev/null
    awk "BEGIN {print $end - $start}" >>"$OUT/$tag.copy"
  done
done

echo
echo "image              crun first  crun second  scrun first        scrun second       plain copy"
for image in "${images[@]}"; do
  tag="$(basename "$image")"
  printf '%-18s %-11s %-12s %-18s %-18s %s\n' "$tag" \
    "$(summary <"$OUT/$tag.crun.first")" "$(summary <"$OUT/$tag.crun.second")" \
    "$(summary <"$OUT/$tag.scrun.first")" "$(summary <"$OUT/$tag.scrun.second")" \
    "$(summary <"$OUT/$tag.copy")"
done
busybox_second="$(sort -g "$OUT/busybox.scrun.second" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
echo
for image in "${images[@]:1}"; do
  tag="$(basename "$image")"
  second="$(sort -g "$OUT/$tag.scrun.second" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
  first="$(sort -g "$OUT/$tag.scrun.first" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
  copy="$(sort -g "$OUT/$tag.copy" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
  echo "$tag: second run through scrun / busybox's: $(awk "BEGIN {printf \"%.2f\", $second / $busybox_second}")x;" \
    "first run / a plain copy into the scratch: $(awk "BEGIN {printf \"%.2f\", $first / $copy}")x"
done

# the scratch's growth while one container of each image runs (what it stages of its own)
echo
for image in "${images[@]}"; do
  podman --runtime scrun run --rm "$image" true # in the image cache (the rounds emptied it)
  before="$(du -sk "$SCRATCH" | cut -f1)"
  id="$(podman --runtime scrun run -d "$image" sleep 60)"
  for _ in $(seq 100); do
    [ "$(podman inspect -f '{{.State.Running}}' "$id")" = true ] && break
    sleep 0.2
  done
  after="$(du -sk "$SCRATCH" | cut -f1)"
  podman rm -f -t 0 "$id" >/dev/null
  echo "$(basename "$image"): the scratch grows by $(((after - before) / 1024)) MiB per running container"
done
nothing_left
