#!/usr/bin/env bash
# Measures sbatch submission throughput on the local cluster without and with job_submit/heshare,
# in one run (the machine is shared and noisy: compare the ratio, not the absolute rates).
#
#   scripts/submit-throughput.sh [JOBS]     (default 300; needs root, slurm-wlm, munge, a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-300}
plugin=$PWD/target/release/libheshare.so
[ -f "$plugin" ] || { echo "build first: cargo build --release" >&2; exit 1; }

rate() { # $1: label, rest: extra sbatch options
  local label=$1; shift
  local dir; dir=$(mktemp -d /tmp/heshare-tput-XXXX)
  trap 'scripts/local-slurm.sh stop "$dir" >/dev/null 2>&1 || true' RETURN
  if [ "$label" = plugin ]; then
    HESHARE_PLUGIN=$plugin HESHARE_SLURM_PORT=$((17900 + RANDOM % 50)) scripts/local-slurm.sh start "$dir" >/dev/null
  else
    HESHARE_SLURM_PORT=$((17950 + RANDOM % 40)) scripts/local-slurm.sh start "$dir" >/dev/null
  fi
  export SLURM_CONF=$dir/etc/slurm.conf
  local start end
  start=$(date +%s.%N)
  for _ in $(seq "$jobs"); do
    sbatch --hold --chdir="$dir" -o /dev/null --gres=gpu:1 "$@" --wrap true >/dev/null
  done
  end=$(date +%s.%N)
  echo "$label $(echo "$jobs / ($end - $start)" | bc -l)"
}

plain=$(rate plain | awk '{print $2}')
with=$(rate plugin --gpu-class=vit-infer --gpu-share=auto | awk '{print $2}')
printf 'sbatch submissions/s without heshare: %.1f\n' "$plain"
printf 'sbatch submissions/s with heshare:    %.1f\n' "$with"
printf 'ratio with/without: %.3f\n' "$(echo "$with / $plain" | bc -l)"
