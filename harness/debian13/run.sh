#!/usr/bin/env bash
# harness/debian13/run.sh CMD... -- run CMD in the project's copy inside the Debian 13 root
# (built, mounted and refreshed first by root.sh), with a clean environment and the Debian
# 13 cluster's knobs (cluster dir, ports: see lib.sh). The Makefile's PLATFORM=debian13
# targets come through here, e.g. `harness/debian13/run.sh make test`.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || die13 "usage: $0 CMD..."
"$HARNESS13/root.sh"
enter13 "$@"
