#!/usr/bin/env bash
# Fetches and unpacks Debian's source package of the installed Slurm (slurm-wlm), Debian's
# patches applied, for its regression suite (testsuite/): what scripts/slurm-regression.sh runs.
#
#   scripts/slurm-source.sh DIR      prints the unpacked tree's path (DIR/slurm-wlm-VERSION);
#                                    exit 3 when the archive does not carry that source
#
# The version is the installed package's, so the tests match the daemons under test; the
# release is this machine's (/etc/os-release). apt reads a deb-src list of its own (the system's
# sources are not touched). A tree already unpacked in DIR is reused. Needs apt and dpkg-source
# (Debian's dpkg-dev).
set -euo pipefail
dir=${1:?usage: scripts/slurm-source.sh DIR}
die() { echo "slurm-source: $*" >&2; exit 1; }
version=$(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null) || die "slurm-wlm is not installed"
[ -n "$version" ] || die "slurm-wlm is not installed"
upstream=${version#*:}
upstream=${upstream%-*}
tree="$dir/slurm-wlm-$upstream"
if [ -d "$tree/testsuite/python/tests" ]; then
  echo "$tree"
  exit 0
fi
command -v dpkg-source >/dev/null || die "dpkg-source missing: install dpkg-dev"
. /etc/os-release
codename=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
# Unstable names the next release as its codename ("forky/sid" in /etc/debian_version), but its
# packages, and their sources, are in sid.
case "$(cat /etc/debian_version 2>/dev/null)" in */sid) codename=sid ;; esac
mkdir -p "$dir/apt/lists/partial"
dir=$(cd "$dir" && pwd)
tree="$dir/slurm-wlm-$upstream"
cat > "$dir/apt/sources.list" <<LIST
deb-src http://deb.debian.org/debian $codename main
LIST
apt_opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$dir/apt/lists" -o APT::Sandbox::User=root
  # Unstable's Release file is valid for a week only; a mirror a little behind must not stop
  # this (the signatures are still checked).
  -o Acquire::Check-Valid-Until=false)
apt-get "${apt_opts[@]}" -q update >&2 || die "apt-get update of the deb-src list failed"
rm -rf "$tree"
if (cd "$dir" && apt-get "${apt_opts[@]}" -q source --download-only "slurm-wlm=$version" >&2); then
  dsc="$dir/slurm-wlm_${version#*:}.dsc"
  dpkg-source --no-check -x "$dsc" "$tree" >&2 || die "cannot unpack $dsc"
else
  # A mirror may list a stable update's source without carrying its .dsc and Debian diff; the
  # upstream tarball, which apt fetched, holds the same testsuite/ (Debian's patches leave it).
  orig=$(ls "$dir/slurm-wlm_$upstream".orig.tar.* 2>/dev/null | head -n1 || true)
  # Exit 3: the archive lists this Slurm but does not carry its source (a partial mirror).
  [ -n "$orig" ] || { echo "slurm-source: the archive ($codename) carries no source of slurm-wlm $version" >&2; exit 3; }
  echo "slurm-source: no Debian source package of $version here; using the upstream $(basename "$orig")" >&2
  mkdir -p "$tree"
  tar -xf "$orig" -C "$tree" --strip-components=1 || die "cannot unpack $orig"
fi
[ -d "$tree/testsuite/python/tests" ] || die "$tree has no testsuite/"
echo "$tree"
