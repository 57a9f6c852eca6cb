#!/usr/bin/env bash
# harness/debian/root.sh PLATFORM -- make sure the platform's Debian root (lib.sh) exists and
# is ready to use:
#   1. build it when missing: debootstrap --variant=minbase SUITE into ROOT.new, the
#      harness's packages (harness/install-deps.sh, run inside), then rename: a build that
#      was interrupted leaves no half root behind (the next run starts it again)
#   2. its mount namespace (idempotent): what a system needs mounted, pivot_root'ed
#   3. a copy of the project at its own path inside (its .venv: the root's Python)
# About 50 s on a new machine, 0.1 s when everything is there. Stop with down.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
platform_init "${1:-}"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"

# ------------------------------------------------------------------ 1. build
# what this script needs on the host
missing=()
for tool in debootstrap rsync; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  log "apt-get install ${missing[*]} (host)"
  export DEBIAN_FRONTEND=noninteractive
  # one at a time: the roots of two platforms may be built at once (.ci/run)
  flock /run/scrun-debian-host-apt.lock /bin/sh -c '
    apt-get install -y -q --no-install-recommends "$@" >&2 \
      || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "$@" >&2; }' \
    sh "${missing[@]}"
fi

host_mirror() {
  local m=""
  m="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [ -n "$m" ] || m="$(awk '$1 == "deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
  echo "${m:-http://deb.debian.org/debian}"
}

# debootstrap's script for the suite: Debian 12's debootstrap has none named after a suite
# newer than trixie, and testing's script fits any suite after stable
debootstrap_script() {
  local d=/usr/share/debootstrap/scripts
  if [ -e "$d/$SUITE" ]; then echo "$d/$SUITE"; else echo "$d/testing"; fi
}

build_root() {
  local new="$R.new" mirror
  mirror="$(knob MIRROR "$(host_mirror)")"
  # a previous, interrupted build: its mounts first, then the directory
  local m
  for m in $(mounts_under "$new"); do umount -l "$m"; done
  rm -rf "$new"
  mkdir -p "$(dirname "$R")" "$APT_CACHE"
  log "debootstrap --variant=minbase $SUITE $new $mirror (about 30 s)"
  debootstrap --variant=minbase --cache-dir="$APT_CACHE" "$SUITE" "$new" "$mirror" \
    "$(debootstrap_script)" >"$R.debootstrap.log" 2>&1 \
    || { tail -20 "$R.debootstrap.log" >&2; die "debootstrap of $SUITE from $mirror failed (log: $R.debootstrap.log)"; }
  # apt inside needs /proc (some maintainer scripts read it); pip inside the root needs the
  # host's CA configuration (a site's TLS proxy may be trusted only there)
  mount -t proc proc "$new/proc"
  mount --bind "$APT_CACHE" "$new/var/cache/apt/archives"
  cp /etc/ssl/certs/ca-certificates.crt "$new/etc/ssl/certs/host-ca-bundle.crt" 2>/dev/null \
    || { mkdir -p "$new/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$new/etc/ssl/certs/host-ca-bundle.crt"; }
  printf '[global]\ncert = /etc/ssl/certs/host-ca-bundle.crt\n' >"$new/etc/pip.conf"
  cp /etc/resolv.conf "$new/etc/resolv.conf" 2>/dev/null || true
  # A testing suite's Release file may be past its Valid-Until on a mirror that is not
  # refreshed (apt then refuses it: "Release file ... is expired")
  echo 'Acquire::Check-Valid-Until "false";' >"$new/etc/apt/apt.conf.d/90scrun-no-valid-until"
  install -m 755 "$REPO/harness/install-deps.sh" "$new/tmp/install-deps.sh"
  log "packages inside the root (harness/install-deps.sh, about 20 s)"
  local rc=0
  chroot "$new" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    /tmp/install-deps.sh >"$R.packages.log" 2>&1 || rc=$?
  umount "$new/var/cache/apt/archives"
  umount "$new/proc"
  rm -f "$new/tmp/install-deps.sh"
  if [ "$rc" != 0 ]; then
    # install-deps.sh's own one-line verdict (e.g. what the archive no longer has) goes last
    tail -20 "$R.packages.log" >&2
    die "installing packages into the $SUITE root failed (log: $R.packages.log)"
  fi
  mv "$new" "$R"
  log "root ready: $R"
}
[ -x "$R/usr/bin/apt-get" ] || build_root

# ------------------------------------------------------------------ 2. mounts
# The root is entered through a mount namespace of its own (kept alive by a bind mount of
# it on $NS), whose "/" IS the root (pivot_root), not through chroot: the kernel refuses
# to create user namespaces for a chrooted process ("clone: Operation not permitted" from
# every rootless crun of a container step), and one namespace for every process in the
# root lets slurmd's crun see podman's overlay mounts. Its mounts stay out of the host's
# mount table; down.sh drops the namespace and they all go. A namespace that no longer
# looks right (a half-made one, a root rebuilt meanwhile) is dropped and made again.
ns_ok() {
  mountpoint -q "$NS" && nsenter --mount="$NS" -- /bin/sh -c \
    'mountpoint -q /proc && mountpoint -q /run && mountpoint -q /sys && test -x /usr/bin/apt-get &&
     grep -Eq "^[0-9]+ [0-9]+ [0-9:]+ [^ ]+ / .* shared:" /proc/self/mountinfo' 2>/dev/null
}
if ! ns_ok; then
  # an old namespace that is not right any more: this clone's daemons in it go first (they
  # must share the namespace with the podman and srun that will talk to them)
  if mountpoint -q "$NS"; then "$DEBIAN_HARNESS/down.sh" "$PLATFORM"; fi
  mkdir -p "$(dirname "$NS")"
  # the file's mount must not propagate (else: "unshare: cannot ... mount propagation")
  if ! mountpoint -q "$(dirname "$NS")"; then
    mount --bind "$(dirname "$NS")" "$(dirname "$NS")"
    mount --make-private "$(dirname "$NS")"
  fi
  umount "$NS" 2>/dev/null || true
  touch "$NS"
  # The root bind-mounted onto itself (pivot_root needs a mount point; crun then finds "/"
  # a mount point too), shared within the namespace as systemd makes "/" (else rootless
  # podman warns that "/" is not a shared mount, on every call); a fresh /proc; the host's /sys and /dev (cgroup hierarchies,
  # /dev/pts, /dev/shm come along); /run a private tmpfs (podman's runroot, crun's state).
  # shellcheck disable=SC2016  # expanded by the inner sh
  unshare --mount="$NS" --propagation private /bin/sh -c '
    set -e
    mount --bind "$1" "$1"
    mount -t proc proc "$1/proc"
    mount --rbind /sys "$1/sys"
    mount --rbind /dev "$1/dev"
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$1/run"
    mkdir -p "$1/.oldroot"
    cd "$1"
    pivot_root . .oldroot
    umount -l /.oldroot
    rmdir /.oldroot
    mount --make-rshared /' sh "$R" || die "could not make the mount namespace of $R"
  ns_ok || die "the mount namespace of $R is not usable"
  log "mount namespace ready: $NS"
fi
# hyperfine (bench/ only) is not in every suite (testing had none): then stable's, from the
# same mirror (a Rust binary that needs only libc), through a source pinned so that nothing
# else comes from it
if [ ! -x "$R/usr/bin/hyperfine" ]; then
  log "hyperfine: not in $SUITE, stable's instead"
  mirror="$(knob MIRROR "$(host_mirror)")"
  printf 'Types: deb\nURIs: %s\nSuites: stable\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$R/etc/apt/sources.list.d/scrun-stable.sources"
  printf 'Package: *\nPin: release a=stable\nPin-Priority: 1\n' >"$R/etc/apt/preferences.d/scrun-stable"
  nsenter --mount="$NS" -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    DEBIAN_FRONTEND=noninteractive /bin/sh -c \
    'apt-get update -q && apt-get install -y -q --no-install-recommends -t stable hyperfine' \
    >"$R.hyperfine.log" 2>&1 || log "hyperfine from stable failed (bench/ needs it; log: $R.hyperfine.log)"
fi
cp /etc/hosts "$R/etc/hosts"
cp /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
# podman 5 warns on every call that cgroups v1 is deprecated (this host's layout): not for
# logins (su -, whose PAM reads /etc/environment) either
grep -qx PODMAN_IGNORE_CGROUPSV1_WARNING=1 "$R/etc/environment" 2>/dev/null \
  || echo PODMAN_IGNORE_CGROUPSV1_WARNING=1 >>"$R/etc/environment"
# cluster-up.sh names the first node after `hostname -s`: same answer inside
hostname >"$R/etc/hostname"

# ------------------------------------------------------------------ 3. the project
# A copy of the clone at the SAME path inside, with its own .venv (Python): the
# Makefile, harness/*.sh and the tests use the same paths on both platforms. A copy, not a
# bind mount: the host's .venv stays the Debian 12 one, and a clone can be deleted at any
# time. Refreshed at every call (rsync keeps mtimes, so `make venv` reinstalls only after a
# change). Copies of clones that are gone from the host are removed (CI clones come and go).
CLONES="$R/var/lib/scrun/clones"
mkdir -p "$(dirname "$CLONES")" "$R$REPO"
touch "$CLONES"
grep -qxF "$REPO" "$CLONES" || echo "$REPO" >>"$CLONES"
while read -r clone; do
  if [ -n "$clone" ] && [ "$clone" != "$REPO" ] && [ ! -e "$clone/Makefile" ]; then
    log "removing the copy of $clone (gone from the host)"
    rm -rf "${R:?}$clone"
  fi
done <"$CLONES"
while read -r clone; do [ -e "$clone/Makefile" ] && echo "$clone"; done <"$CLONES" >"$CLONES.new"
mv "$CLONES.new" "$CLONES"
rsync -a --delete --exclude=/.venv --exclude=/.git --exclude=__pycache__ --exclude=.mypy_cache \
  --exclude=.ruff_cache --exclude=.pytest_cache --exclude=/build "$REPO/" "$R$REPO/"
