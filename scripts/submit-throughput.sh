#!/usr/bin/env bash
# Measures sbatch submission throughput on the local cluster without and with heshare (the
# job_submit plugin in slurmctld and its SPANK options in sbatch), in one run: two clusters run
# side by side and batches of submissions alternate between them, so the noise of a shared
# machine falls on both alike. Compare the ratio, not the absolute rates.
#
#   scripts/submit-throughput.sh [JOBS]     (default 400 per cluster; needs root, slurm-wlm,
#                                            munge and a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-400}
batch=20
plugin=$PWD/target/release/libheshare.so
[ -f "$plugin" ] || { echo "build first: cargo build --release" >&2; exit 1; }

plain=$(mktemp -d /tmp/heshare-tput-plain-XXXX)
with=$(mktemp -d /tmp/heshare-tput-with-XXXX)
trap 'scripts/local-slurm.sh stop "$plain" >/dev/null 2>&1 || true; scripts/local-slurm.sh stop "$with" >/dev/null 2>&1 || true' EXIT
HESHARE_SLURM_PORT=17950 scripts/local-slurm.sh start "$plain" >/dev/null
HESHARE_PLUGIN=$plugin HESHARE_SLURM_PORT=17910 scripts/local-slurm.sh start "$with" >/dev/null

elapsed_plain=0
elapsed_with=0
submit() { # $1: cluster dir, rest: sbatch options; prints seconds taken
  local dir=$1; shift
  local s e
  s=$(date +%s.%N)
  for _ in $(seq $batch); do
    SLURM_CONF=$dir/etc/slurm.conf sbatch --hold --chdir="$dir" -o /dev/null --gres=gpu:1 "$@" --wrap true >/dev/null
  done
  e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}
for _ in $(seq $((jobs / batch))); do
  elapsed_plain=$(echo "$elapsed_plain + $(submit "$plain")" | bc -l)
  elapsed_with=$(echo "$elapsed_with + $(submit "$with" --gpu-class=vit-infer --gpu-share=auto)" | bc -l)
done
rate_plain=$(echo "$jobs / $elapsed_plain" | bc -l)
rate_with=$(echo "$jobs / $elapsed_with" | bc -l)
printf 'sbatch submissions/s without heshare: %.1f\n' "$rate_plain"
printf 'sbatch submissions/s with heshare:    %.1f\n' "$rate_with"
printf 'ratio with/without: %.3f\n' "$(echo "$rate_with / $rate_plain" | bc -l)"
