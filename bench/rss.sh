#!/usr/bin/env bash
# bench/rss.sh -- the anchor's resident memory while its container runs (target <= 15 MB),
# and whether it stays flat: one container before and after 50 sequential `podman run`s,
# and 16 containers running at once. Ends by checking that nothing was left behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out="$(mktemp -d)"
trap 'podman rm -f -t 0 $(cat "$out"/name.* 2>/dev/null) >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

# Start detached `sleep` containers named $1-1..$1-N at once; print each anchor's VmRSS (kB).
anchors_rss() {
  local prefix="$1" count="$2" i pids=()
  for i in $(seq "$count"); do
    echo "$prefix-$i" >"$out/name.$prefix-$i"
    podman --runtime scrun run -d --name "$prefix-$i" localhost/busybox sleep 600 >/dev/null &
    pids+=("$!")
  done
  # (exit: this runs in a command substitution, where set -e does not apply)
  wait_all "${pids[@]}" || exit 1
  for i in $(seq "$count"); do rss_kb "$(podman inspect -f '{{.State.Pid}}' "$prefix-$i")"; done
  local names=()
  for i in $(seq "$count"); do names+=("$prefix-$i"); done
  podman rm -f -t 0 "${names[@]}" >/dev/null
}
summary() { sort -n | awk '{v[NR]=$1; s+=$1} END {printf "min %.1f MB, median %.1f MB, max %.1f MB, total %.1f MB\n", v[1]/1024, v[int((NR+1)/2)]/1024, v[NR]/1024, s/1024}'; }

first="$(anchors_rss before 1)"
for i in $(seq 50); do
  podman --runtime scrun run --rm localhost/busybox true
done
after="$(anchors_rss after 1)"
echo "anchor RSS, one container: $((first / 1024)).$((first % 1024 * 10 / 1024)) MB before 50 sequential runs, $((after / 1024)).$((after % 1024 * 10 / 1024)) MB after"
together="$(anchors_rss together 16 | summary)"
echo "anchor RSS, 16 containers at once: $together"
nothing_left
