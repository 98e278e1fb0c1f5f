#!/usr/bin/env bash
# What heshare's node helper can do on this machine's NVIDIA GPU, checked for real:
#   1. NVML facts: driver, energy counter, power limits, supported clocks, and whether a locked
#      SM clock can be set and reset (`heshare node gpus --try-lock`);
#   2. an MPS control daemon for GPU 0: started, asked for its servers, stopped;
#   3. a small CUDA program (PyTorch if present, else nvcc, else none) under a 30% MPS share;
#   4. `heshare prolog` / `task-prolog` / `epilog` with the NVML backend around that program,
#      then the accounting record, the report, and the SM clock after the Epilog.
#
#   scripts/gpu-check.sh [HESHARE_BINARY]     (run as root; setting clocks needs it)
#
# Each step says what the machine answered; a refusal (a VM that forbids locked clocks, no
# MPS binary) is printed and the script goes on. Exit status: 0 when every step worked,
# 1 when some step was refused or failed, 2 when there is no NVIDIA driver at all.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/heshare}
if [ ! -x "$bin" ]; then
  echo "== building heshare"
  cargo build --release --bin heshare >/dev/null || { echo "cargo build failed"; exit 2; }
fi
failed=0
step() { echo; echo "== $*"; }
bad() { echo "!! $*"; failed=1; }
work=$(mktemp -d /tmp/heshare-gpu-check.XXXXXX)
trap 'echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe nvidia-cuda-mps-control >/dev/null 2>&1; rm -rf "$work"' EXIT

step "nvidia-smi"
if ! nvidia-smi --query-gpu=index,name,driver_version,power.draw,power.limit,clocks.sm,clocks.max.sm --format=csv; then
  echo "no NVIDIA driver here"; exit 2
fi
nvidia-smi -q -d CLOCK | sed -n '1,40p' | grep -iE "clocks|graphics|sm|locked|applications" | head -20 || true

step "NVML through heshare (heshare node gpus --try-lock)"
"$bin" node gpus --try-lock || bad "heshare node gpus failed"

step "MPS control daemon on GPU 0"
mkdir -p "$work/mps-pipe" "$work/mps-log"
export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
mps=0
if command -v nvidia-cuda-mps-control >/dev/null; then
  if CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID nvidia-cuda-mps-control -d; then
    sleep 1
    echo "daemon started; get_server_list: $(echo get_server_list | nvidia-cuda-mps-control 2>&1)"
    mps=1
  else
    bad "nvidia-cuda-mps-control -d failed"
  fi
else
  bad "nvidia-cuda-mps-control not installed"
fi

# A small CUDA workload, ~6 s of matrix multiplies.
workload() {
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 - <<'PY'
import time, torch
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize(); t = time.time(); n = 0
while time.time() - t < 6:
    c = a @ b; n += 1
torch.cuda.synchronize(); dt = time.time() - t
print(f"pytorch {torch.__version__}: {n} matmuls of 4096^2 in {dt:.1f} s = {2*4096**3*n/dt/1e12:.1f} TFLOP/s")
PY
  elif command -v nvcc >/dev/null; then
    cat > "$work/spin.cu" <<'CU'
#include <cstdio>
__global__ void spin(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; for (int k = 0; k < 20000; k++) v = v * 1.0000001f + 0.5f; x[i] = v; } }
int main() { int n = 1 << 22; float *x; cudaMalloc(&x, n * sizeof(float));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); cudaEventRecord(a);
  for (int r = 0; r < 40; r++) spin<<<(n + 255) / 256, 256>>>(x, n);
  cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b);
  printf("cuda kernel: 40 launches in %.0f ms (%s)\n", ms, cudaGetErrorString(cudaGetLastError())); return 0; }
CU
    nvcc -O2 -o "$work/spin" "$work/spin.cu" && "$work/spin"
  else
    echo "no PyTorch with CUDA and no nvcc: no CUDA program to run"; return 1
  fi
}

step "CUDA program under a 30% MPS share"
if [ "$mps" = 1 ]; then
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 workload || bad "the CUDA program did not run under MPS"
  echo "servers: $(echo get_server_list | nvidia-cuda-mps-control 2>&1)"
  echo quit | nvidia-cuda-mps-control
  sleep 1
  if echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then bad "MPS daemon did not quit"; else echo "daemon quit"; fi
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

step "heshare prolog / task-prolog / epilog with the NVML backend"
gpu_type=$("$bin" node gpus 2>/dev/null | sed -n 's/^GPU 0: .*(catalog: \([a-z0-9._-]*\))$/\1/p')
# A GPU the catalog lacks (e.g. H200) is checked as its nearest catalog type.
[ -n "$gpu_type" ] || gpu_type=h100
{ cat slurm-conf/heshare.toml
  printf '\n[node]\nbackend = "nvml"\nstate_dir = "%s"\naccounting_log = "%s"\nmps_pipe_dir = "%s"\nmps_log_dir = "%s"\ngpu_type = "%s"\n' \
    "$work/state" "$work/accounting.jsonl" "$work/run-mps" "$work/log-mps" "$gpu_type"; } > "$work/heshare.toml"
export HESHARE_CONFIG=$work/heshare.toml
job_env=(SLURM_JOB_ID=900001 SLURM_JOB_USER=root SLURM_JOB_UID=0 SLURMD_NODENAME=gpucheck
         SLURM_JOB_GPUS=0 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 SPANK_HESHARE_CLASS=vit-infer)
t0=$(date +%s%N)
env "${job_env[@]}" "$bin" prolog || bad "prolog failed"
echo "prolog took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
"$bin" node status --node gpucheck
echo "SM clock during the job: $(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -i 0)"
exports=$(env "${job_env[@]}" "$bin" task-prolog) || bad "task-prolog failed"
echo "$exports"
( eval "$exports"; workload ) || bad "the CUDA program did not run under heshare's MPS daemon"
t0=$(date +%s%N)
env "${job_env[@]}" "$bin" epilog || bad "epilog failed"
echo "epilog took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
echo "SM clock after the Epilog: $(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -i 0)"
"$bin" node status --node gpucheck
echo "record:"; cat "$work/accounting.jsonl"
"$bin" report "$work/accounting.jsonl" --by job,gpu-type || bad "report failed"
[ -f "$work/state/gpucheck/helper.log" ] && { echo "helper.log:"; cat "$work/state/gpucheck/helper.log"; }

echo
if [ "$failed" = 0 ]; then echo "gpu-check: every step worked"; else echo "gpu-check: some steps were refused or failed (marked !!)"; fi
exit "$failed"
