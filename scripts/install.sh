#!/usr/bin/env bash
# Builds heshare and installs it under a prefix, then prints the Slurm configuration lines.
#
#   scripts/install.sh [PREFIX]             (default /opt/heshare)
#   scripts/install.sh --check-plugin LIB   whether slurmctld could load LIB as job_submit/heshare
#
# Installs PREFIX/bin/heshare, PREFIX/lib/job_submit_heshare.so (the job_submit plugin),
# PREFIX/lib/spank_heshare.so (the SPANK plugin for the sbatch/srun/salloc options), the node
# helper's links PREFIX/libexec/heshare-{prolog,epilog,task-prolog} and, if absent,
# $HESHARE_SYSCONFDIR/heshare.toml ($HESHARE_SYSCONFDIR: default /etc/slurm), and the sampling
# timer's systemd units (PREFIX/share/heshare/systemd/heshare-sample.{service,timer}). Needs the Slurm
# headers of the Slurm it will run in (Debian: libslurm-dev): the plugin is built against them.
set -euo pipefail

# A library built without the Slurm headers has none of the symbols slurmctld's plugin loader
# looks for ("Plugin name/type/version symbol missing", then a fatal at slurmctld's start): it is
# never installed, whatever the build did.
check_plugin() { # LIB
  command -v nm >/dev/null \
    || { echo "install: nm not found (Debian: binutils): cannot check $1's plugin symbols" >&2; return 1; }
  local sym
  for sym in plugin_name plugin_type plugin_version job_submit; do
    nm -D --defined-only "$1" 2>/dev/null | awk '{print $NF}' | grep -qx "$sym" \
      || { echo "install: $1 was built without Slurm headers (it lacks the symbol $sym that slurmctld needs): install libslurm-dev and libclang-dev, then run scripts/install.sh again" >&2; return 1; }
  done
}
if [ "${1:-}" = --check-plugin ]; then
  [ -n "${2:-}" ] && [ -f "$2" ] || { echo "usage: $0 --check-plugin LIB (a file)" >&2; exit 2; }
  check_plugin "$2" && echo "install: $2 carries the job_submit plugin's symbols"
  exit
fi
prefix=${1:-/opt/heshare}
cd "$(dirname "$0")/.."
[ -e /usr/include/slurm/slurm.h ] || [ -n "${SLURM_INCLUDE_DIR:-}" ] \
  || { echo "install: Slurm headers not found: install libslurm-dev (or set SLURM_INCLUDE_DIR)" >&2; exit 1; }
# bindgen reads slurm.h for the snapshot thread's structs.
ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 \
  || { echo "install: libclang not found: install libclang-dev (bindgen reads the Slurm headers with it)" >&2; exit 1; }
cargo build --release --locked
lib=target/release/libheshare.so
check_plugin "$lib" || exit 1
install -d "$prefix/bin" "$prefix/lib" "$prefix/libexec"
install -m 0755 target/release/heshare "$prefix/bin/heshare"
for hook in prolog epilog task-prolog; do
  ln -sfn ../bin/heshare "$prefix/libexec/heshare-$hook"
done
install -m 0755 "$lib" "$prefix/lib/job_submit_heshare.so"
cc -shared -fPIC -O2 -o "$prefix/lib/spank_heshare.so" c_shim/spank_heshare.c
install -d "$prefix/share/heshare/systemd"
sed "s|/opt/heshare/bin/heshare|$prefix/bin/heshare|" slurm-conf/heshare-sample.service \
  > "$prefix/share/heshare/systemd/heshare-sample.service"
install -m 0644 slurm-conf/heshare-sample.timer "$prefix/share/heshare/systemd/heshare-sample.timer"
sed "s|/opt/heshare/bin/heshare|$prefix/bin/heshare|" slurm-conf/heshare-profiles.service \
  > "$prefix/share/heshare/systemd/heshare-profiles.service"
install -m 0644 slurm-conf/heshare-profiles.timer "$prefix/share/heshare/systemd/heshare-profiles.timer"
etc=${HESHARE_SYSCONFDIR:-/etc/slurm}
if [ ! -e "$etc/heshare.toml" ] && [ -w "$etc" ] 2>/dev/null; then
  install -m 0644 slurm-conf/heshare.toml "$etc/heshare.toml"
  echo "installed $etc/heshare.toml (edit the catalog to match your GPUs; check with heshare check-config)"
fi
sys=$(dirname "$(find /usr/lib /usr/lib64 -name select_cons_tres.so -print -quit 2>/dev/null)")
cat <<LINES
installed $prefix/bin/heshare, $prefix/lib/job_submit_heshare.so and $prefix/lib/spank_heshare.so

Add to slurm.conf (keep your existing PluginDir first; JobSubmitPlugins may list others too):
  PluginDir=${sys:-/usr/lib/x86_64-linux-gnu/slurm-wlm}:$prefix/lib
  JobSubmitPlugins=heshare

Give every GPU node its GPU type as a feature, so heshare can offer a job several types and move a
pending one (e.g. NodeName=gpu[01-08] Gres=gpu:a100:4 Features=a100), and in gres.conf let MPS use
every GPU of a node (Flags=all_sharing on the Name=mps lines). check-config warns when either is
missing.

Add to plugstack.conf (gives sbatch/srun/salloc --gpu-share, --gpu-class, --energy-policy):
  required $prefix/lib/spank_heshare.so

On every GPU node, in slurm.conf (the node helper: MPS daemons, SM clocks, energy accounting
to /var/log/heshare/accounting.jsonl; an existing site Prolog can call \`heshare prolog\` instead).
PrologFlags=Alloc runs the Prolog when the job is allocated, so accounting covers the whole job:
  Prolog=$prefix/libexec/heshare-prolog
  Epilog=$prefix/libexec/heshare-epilog
  TaskProlog=$prefix/libexec/heshare-task-prolog
  PrologFlags=Alloc
and, so the accounting split goes by each job's measured GPU work, the sampling timer:
  systemctl link $prefix/share/heshare/systemd/heshare-sample.service $prefix/share/heshare/systemd/heshare-sample.timer
  systemctl enable --now heshare-sample.timer

On the controller, so jobs nobody labelled are placed by what their earlier runs measured, the
profile update ([profiles] logs in heshare.toml names the nodes' accounting logs as the
controller sees them, e.g. in a shared directory):
  systemctl link $prefix/share/heshare/systemd/heshare-profiles.service $prefix/share/heshare/systemd/heshare-profiles.timer
  systemctl enable --now heshare-profiles.timer

Then: $prefix/bin/heshare check-config --slurm-conf /etc/slurm/slurm.conf
and restart slurmctld.
LINES
