#!/usr/bin/env bash
# bench/compare.sh REV -- is this checkout slower than REV on the commands podman waits for?
# Builds REV's runtime in a worktree of its own (its own venv), then, through each runtime in
# turn, alternating round by round (BENCH_RUNS rounds): `podman run --rm localhost/busybox
# true`; `podman run -d` of a `sleep`, a `state` of it, `podman stop -t 0` and `podman rm`.
# A wrapper times every runtime command (create from exec to exit, start, state, kill,
# delete). Alternating makes the comparison hold
# on a loaded machine: what the other processes take, they take from both sides alike, where
# figures measured minutes apart (two `make bench`) move with the load by tens of percent.
# Both runtimes use this checkout's cluster: its slurm.conf, oci.conf and scrun.lua, so the
# comparison is of the runtime alone. Prints, per command, the medians and interquartile
# ranges of both and their ratio.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
base_rev="${1:?usage: bench/compare.sh REV (a commit to compare this checkout with)}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
base="$out/base"
trap 'podman rm -f -t 0 scrun-compare >/dev/null 2>&1 || true
      git -C "$repo" worktree remove --force "$base" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT

git -C "$repo" worktree add --detach "$base" "$base_rev" >/dev/null
make -C "$base" --no-print-directory venv >/dev/null
# Both read this checkout's site file (the base's venv has none): one file, one cache entry.
site="$VENV_BIN/../etc/scrun/scrun.toml"
[ -f "$site" ] || { echo "bench: no $site (make cluster-up first)" >&2; exit 1; }

# A wrapper per side: one line per runtime command, `SIDE COMMAND START END`.
for side in this base; do
  bin="$VENV_BIN"
  [ "$side" = base ] && bin="$base/.venv/bin"
  cat >"$out/runtime-$side" <<WRAPPER
#!/usr/bin/env bash
command=
for word in "\$@"; do
  case "\$word" in create|start|state|kill|delete) command=\$word; break ;; esac
done
start=\$EPOCHREALTIME; SCRUN_SITE_CONFIG=$site $bin/scrun "\$@"; code=\$?
[ -n "\$command" ] && echo "$side \$command \$start \$EPOCHREALTIME" >>"$out/times"
exit "\$code"
WRAPPER
  chmod +x "$out/runtime-$side"
done

echo "== this checkout ($(git -C "$repo" rev-parse --short HEAD)) against $base_rev, $RUNS runs each, alternating"
for _ in $(seq "$RUNS"); do
  for side in this base; do
    podman --runtime "$out/runtime-$side" run --rm localhost/busybox true
    podman --runtime "$out/runtime-$side" run -d --name scrun-compare localhost/busybox sleep 60 >/dev/null
    "$out/runtime-$side" state "$(podman inspect -f '{{.ID}}' scrun-compare)" >/dev/null
    podman stop -t 0 scrun-compare >/dev/null
    podman rm scrun-compare >/dev/null
  done
done

python3 - "$out/times" <<'PY'
import statistics, sys
from collections import defaultdict

times = defaultdict(list)
for line in open(sys.argv[1]):
    side, command, start, end = line.split()
    times[side, command].append((float(end) - float(start)) * 1000)

def summary(values):
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return median, q3 - q1

print("\n| command | this: median (IQR) | base: median (IQR) | this ÷ base | calls |")
print("|---|---|---|---|---|")
for command in ("create", "start", "state", "kill", "delete"):
    if (this := times.get(("this", command))) and (base := times.get(("base", command))):
        (m_this, iqr_this), (m_base, iqr_base) = summary(this), summary(base)
        print(f"| {command} | {m_this:.1f} ms ({iqr_this:.1f}) | {m_base:.1f} ms ({iqr_base:.1f}) "
              f"| {m_this / m_base:.2f} | {len(this)} / {len(base)} |")
PY
