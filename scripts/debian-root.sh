#!/usr/bin/env bash
# Runs a command in a Debian root of another release, on this machine, against that release's
# Slurm: how heshare is built and tested live on Slurm 24.11 (Debian 13, "trixie") from a
# Debian 12 host.
#
#   scripts/debian-root.sh RELEASE CMD...      e.g.  scripts/debian-root.sh trixie bash .ci/run --inner
#
# The root is built once with debootstrap and cached under $HESHARE_ROOTS (default
# /var/cache/heshare-roots/RELEASE); the Debian packages the tests need are installed in it. Each
# run mounts /proc, /sys and /dev (recursively: slurmd needs the cgroup filesystem), gives the
# root the host's CA bundle, DNS and Rust toolchain (rustup and cargo homes, bind-mounted
# read-only where they are), clones this repository's committed HEAD into a fresh directory in
# the root, and runs CMD there as root. On exit it stops every process left running inside the
# root (by PID), unmounts what it mounted and removes the clone. Needs root and debootstrap.
set -euo pipefail

release=${1:-}
[ -n "$release" ] && [ $# -ge 2 ] || { echo "usage: $0 RELEASE CMD..." >&2; exit 2; }
shift
[ "$(id -u)" -eq 0 ] || { echo "debian-root: must run as root (debootstrap, mounts, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
    || { echo "debian-root: debootstrap is missing and could not be installed" >&2; exit 1; }
}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${HESHARE_ROOTS:-/var/cache/heshare-roots}
root=$cache/$release
# HESHARE_ROOT_PACKAGES replaces the list: with "build-essential git procps ca-certificates" the
# root is a fresh machine with a C toolchain only, as the README's Quick start starts from (use
# its own HESHARE_ROOTS, so the cached roots keep their packages).
packages=${HESHARE_ROOT_PACKAGES:-"slurm-wlm slurmdbd mariadb-server munge libslurm-dev libclang-dev build-essential git procps ca-certificates"}

mounts=()
clone=""
cleanup() {
  local rc=$?
  set +e
  # Every process whose root is ours (slurmctld, slurmd, munged a test left behind): by PID.
  local pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill "$pid" 2>/dev/null
  done
  sleep 1
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill -9 "$pid" 2>/dev/null
  done
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[$i]}" 2>/dev/null || umount -l "${mounts[$i]}" 2>/dev/null
  done
  [ -n "$clone" ] && rm -rf "$root$clone"
  exit "$rc"
}
trap cleanup EXIT INT TERM

bind() { # bind SRC DST [ro]
  mkdir -p "$root$2"
  mount --rbind "$1" "$root$2"
  mount --make-rslave "$root$2"
  [ "${3:-}" = ro ] && mount -o remount,bind,ro "$root$2"
  mounts+=("$root$2")
}

if [ ! -e "$root/.heshare-ready" ]; then
  echo "debian-root: building a $release root in $root (once)"
  mkdir -p "$cache"
  rm -rf "$root"
  debootstrap --variant=minbase --include=ca-certificates "$release" "$root" http://deb.debian.org/debian >/dev/null
fi
mount -t proc proc "$root/proc"
mounts+=("$root/proc")
bind /sys /sys
bind /dev /dev
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's names, as for DNS: Slurm resolves "localhost", and slurmctld the host name srun
# and salloc report (a minimal root has no /etc/hosts; without that name each job's completion
# message waited ten seconds on the resolver and its step's another minute on retries, long
# enough for Slurm's own tests to time out).
{
  cat /etc/hosts 2>/dev/null
  grep -qw localhost /etc/hosts 2>/dev/null || printf '127.0.0.1\tlocalhost\n'
  grep -qw "$(hostname)" /etc/hosts 2>/dev/null || printf '127.0.1.1\t%s\n' "$(hostname)"
} > "$root/etc/hosts"
# The packages the root lacks (all of them when it is new; those added to the list since).
missing=()
for pkg in $packages; do
  chroot "$root" dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  # Unstable's Release file is valid for a week only; a mirror that is a little behind must not
  # stop the build (the signatures are still checked).
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false update -q >/dev/null
  # No daemon a package installs starts in the root (the tests start their own).
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
  chmod 0755 "$root/usr/sbin/policy-rc.d"
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  touch "$root/.heshare-ready"
fi
# The host's CA bundle (crates.io over TLS) and Rust toolchain, where rustup put them.
bind /etc/ssl/certs /etc/ssl/certs ro
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
bind "$rustup_home" /opt/heshare-rustup ro
mkdir -p "$cargo_home/registry"
bind "$cargo_home/bin" /opt/heshare-cargo/bin ro
bind "$cargo_home/registry" /opt/heshare-cargo/registry
clone=/srv/heshare-$$
git clone -q "$repo" "$root$clone"
echo "debian-root: $release ($(chroot "$root" slurmctld -V)), running: $*"
# In the background and waited for, so that a signal reaches the trap at once (bash defers traps
# until a foreground child exits).
# The command's environment is scrubbed but for the CI switches (HESHARE_CI_*) and the
# regression suite's (HESHARE_REGRESSION_*).
ci_env=()
while IFS='=' read -r name value; do
  [[ $name == HESHARE_CI_* || $name == HESHARE_REGRESSION_* ]] && ci_env+=("$name=$value")
done < <(env)
chroot "$root" /usr/bin/env -i HOME=/root PATH=/opt/heshare-cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  RUSTUP_HOME=/opt/heshare-rustup CARGO_HOME=/opt/heshare-cargo TMPDIR=/tmp LANG=C.UTF-8 "${ci_env[@]}" \
  /bin/sh -c 'cd "$0" && exec "$@"' "$clone" "$@" &
wait $!
