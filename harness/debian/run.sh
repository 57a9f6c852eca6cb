#!/usr/bin/env bash
# harness/debian/run.sh PLATFORM CMD... -- run CMD in the project's copy inside the
# platform's Debian root (built, mounted and refreshed first by root.sh), with a clean
# environment and the platform cluster's knobs (cluster dir, ports: see lib.sh). The
# Makefile's test-<platform>, shell-<platform> and PLATFORM=<platform> targets come through
# here, e.g. `harness/debian/run.sh debian14 make test`.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
platform_init "${1:-}"
shift
[ $# -gt 0 ] || die "usage: $0 PLATFORM CMD..."
"$DEBIAN_HARNESS/root.sh" "$PLATFORM"
enter "$@"
