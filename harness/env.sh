#!/usr/bin/env bash
# harness/env.sh [DIR] -- print the shell exports for the test cluster in DIR:
#   eval "$(harness/env.sh)"      (or: eval "$(make -s env)")
# Pure: starts nothing, changes nothing (cluster-up.sh does the work).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cluster_paths "${1:-}"

[ -s "$ETC/slurm.conf" ] || echo "[env] warning: no cluster in $D yet (run make cluster-up)" >&2

# venv's bin first (scrun, pytest), once; the rest of the caller's PATH unchanged.
new_path="$VENV/bin"
IFS=: read -ra parts <<<"$PATH"
for p in "${parts[@]}"; do [ -n "$p" ] && [ "$p" != "$VENV/bin" ] && new_path+=":$p"; done
case ":$new_path:" in *":/usr/sbin:"*) ;; *) new_path+=":/usr/sbin:/sbin" ;; esac

test_user="" test_user2=""
[ -s "$ETC/test-user" ] && test_user="$(cat "$ETC/test-user")"
[ -s "$ETC/test-user2" ] && test_user2="$(cat "$ETC/test-user2")"

emit() { printf 'export %s=%q\n' "$1" "$2"; }
emit SLURM_CONF "$ETC/slurm.conf"
emit SCRUN_CLUSTER_DIR "$D"
emit MUNGE_SOCKET "$MUNGE_SOCK"
emit CONTAINERS_CONF "$CTR/containers.conf"
emit SCRUN_TEST_BUNDLE "$BUNDLE"
# the scratch dir the compute nodes share with this host (scrun.lua stages into it)
emit SCRUN_SHARED_DIR "$SHARED"
# the private dockerd (harness/docker-up.sh; the docker tests start and stop it themselves)
emit DOCKER_HOST "unix://$D/docker/docker.sock"
# the two unprivileged users with rootless podman (harness/test-users.sh)
[ -n "$test_user" ] && emit SCRUN_TEST_USER "$test_user"
[ -n "$test_user2" ] && emit SCRUN_TEST_USER2 "$test_user2"
emit PATH "$new_path"
