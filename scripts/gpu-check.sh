#!/usr/bin/env bash
# What heshare's node helper can do on this machine's NVIDIA GPU, checked for real:
#   1. NVML facts: driver, energy counter, power limits, supported clocks, and whether a locked
#      SM clock can be set and reset (`heshare node gpus --try-lock`);
#   2. an MPS control daemon for GPU 0: started, asked for its servers, stopped;
#   3. a small CUDA program (PyTorch if present, else nvcc, else none) under a 30% MPS share;
#   4. `heshare prolog` / `task-prolog` / `epilog` with the NVML backend around that program,
#      then the accounting record, the report, and the SM clock after the Epilog;
#   5. the measured split: two jobs on GPU 0 under MPS, one busy, one mostly idle and claiming
#      the heavier class, each process in a `job_N` cgroup as slurmstepd would put it; their
#      records (basis, energy) beside NVML's own per-process accounting;
#   6. another user's share on a GPU whose MPS server root holds: the helper runs it outside MPS
#      (`[node] other_user_share = "time-slice"`); both programs must run side by side, as root
#      and as nobody, the second user's without an MPS server of its own.
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
# The environment slurmd gives a job's Prolog on GPU 0 of node gpucheck, one VAR=value a line:
# prolog_env JOBID USER UID SHARE_PCT CLASS
prolog_env() {
  printf '%s\n' "SLURM_JOB_ID=$1" "SLURM_JOB_USER=$2" "SLURM_JOB_UID=$3" SLURMD_NODENAME=gpucheck \
    SLURM_JOB_GPUS=0 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$4" "SPANK_HESHARE_CLASS=$5"
}
work=$(mktemp -d /tmp/heshare-gpu-check.XXXXXX); export work
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

# A small CUDA workload, ~6 s of matrix multiplies; WORK_DUTY (0..1, default 1) is the
# fraction of the time it keeps the GPU busy.
workload() {
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 - <<'PY'
import os, time, torch
duty = float(os.environ.get("WORK_DUTY", "1"))
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize(); t = time.time(); n = 0; busy = 0.0
while time.time() - t < 6:
    s = time.time(); c = a @ b; torch.cuda.synchronize(); busy += time.time() - s; n += 1
    if duty < 1: time.sleep((time.time() - s) * (1 - duty) / duty)
dt = time.time() - t
print(f"pytorch {torch.__version__} (pid {os.getpid()}, duty {duty}): {n} matmuls of 4096^2 in {dt:.1f} s, busy {busy:.1f} s = {2*4096**3*n/dt/1e12:.1f} TFLOP/s")
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
  printf '\n[node]\nbackend = "nvml"\nstate_dir = "%s"\naccounting_log = "%s"\nmps_control = "%s"\nmps_pipe_dir = "%s"\nmps_log_dir = "%s"\ngpu_type = "%s"\n' \
    "$work/state" "$work/accounting.jsonl" "$(command -v nvidia-cuda-mps-control || echo /usr/bin/nvidia-cuda-mps-control)" \
    "$work/run-mps" "$work/log-mps" "$gpu_type"; } > "$work/heshare.toml"
export HESHARE_CONFIG=$work/heshare.toml
mapfile -t job_env < <(prolog_env 900001 root 0 30 vit-infer)
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

step "measured split: a busy job and a mostly idle one on GPU 0 under MPS"
# Each workload in a cgroup named as slurmstepd names a job's (the helper maps processes to jobs
# through it); without a writable cgroup2 tree the split falls back to the model, and says so.
cg=/sys/fs/cgroup/heshare-gpu-check
in_job_cgroup() {  # JOBID COMMAND...
  local id=$1; shift
  if mkdir -p "$cg/job_$id" 2>/dev/null; then
    sh -c 'echo $$ > "$1/cgroup.procs" 2>/dev/null || echo "(not moved into $1)"; shift; exec "$@"' sh "$cg/job_$id" "$@"
  else
    "$@"
  fi
}
mapfile -t busy_env < <(prolog_env 900002 root 0 50 vit-infer)
mapfile -t idle_env < <(prolog_env 900003 root 0 50 bert-train)
env "${busy_env[@]}" "$bin" prolog || bad "prolog (busy) failed"
env "${idle_env[@]}" "$bin" prolog || bad "prolog (idle) failed"
ex_busy=$(env "${busy_env[@]}" "$bin" task-prolog)
ex_idle=$(env "${idle_env[@]}" "$bin" task-prolog)
( eval "$ex_busy"; export WORK_DUTY=1; in_job_cgroup 900002 bash -c "$(declare -f workload); workload" ) &
( eval "$ex_idle"; export WORK_DUTY=0.2; in_job_cgroup 900003 bash -c "$(declare -f workload); workload" ) &
wait
env "${busy_env[@]}" "$bin" epilog || bad "epilog (busy) failed"
env "${idle_env[@]}" "$bin" epilog || bad "epilog (idle) failed"
echo "NVML's own per-process accounting:"
nvidia-smi --query-accounted-apps=gpu_name,pid,gpu_util,mem_util,max_memory_usage,time --format=csv -i 0 || echo "(no accounted apps)"
echo "records:"
grep -E '"job_id":"90000[23]"' "$work/accounting.jsonl"
python3 - "$work/accounting.jsonl" <<'PY' || bad "the measured split did not hold (see above)"
import json, sys
recs = {r["job_id"]: r for r in map(json.loads, open(sys.argv[1])) if r.get("job_id") in ("900002", "900003")}
b, i = recs["900002"], recs["900003"]
print(f"busy job (claims vit-infer): {b['energy_j']:.0f} J, basis {b['basis']}; "
      f"mostly idle job (claims bert-train): {i['energy_j']:.0f} J, basis {i['basis']}")
ok = b["basis"] in ("measured", "mixed") and b["energy_j"] > i["energy_j"]
print("measured split holds" if ok else "measured split does NOT hold")
sys.exit(0 if ok else 1)
PY
rmdir "$cg"/job_* "$cg" 2>/dev/null || true

step "another user's share beside root's MPS server: outside MPS, time-sliced"
echo "compute mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader -i 0)"
chmod 0711 "$work"
[ -f "$work/spin" ] && chmod 0755 "$work/spin"
mapfile -t a_env < <(prolog_env 900004 root 0 50 bert-train)
mapfile -t b_env < <(prolog_env 900005 nobody 65534 50 bert-train)
env "${a_env[@]}" "$bin" prolog || bad "prolog (root) failed"
env "${b_env[@]}" "$bin" prolog || bad "prolog (nobody) failed"
ex_a=$(env "${a_env[@]}" "$bin" task-prolog)
ex_b=$(env "${b_env[@]}" "$bin" task-prolog)
echo "root's task-prolog:"; echo "$ex_a"
echo "nobody's task-prolog:"; echo "$ex_b"
echo "$ex_b" | grep -q "runs outside MPS" || bad "nobody's job was not run outside MPS"
# TaskProlog's own words: export/unset lines for the shell, print lines for the job's output.
shell_of() { grep -E '^(export|unset) '; }
( eval "$(echo "$ex_a" | shell_of)"; workload ) > "$work/a.out" 2>&1 &
sleep 1
runuser -u nobody -- env -i PATH="$PATH" HOME=/ work="$work" bash -c \
  "$(echo "$ex_b" | shell_of); $(declare -f workload); workload" > "$work/b.out" 2>&1 &
sleep 2
echo "MPS servers while both run: $(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$work/run-mps/gpucheck/gpu0 nvidia-cuda-mps-control 2>&1)"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv -i 0 || true
wait
echo "root (MPS client): $(cat "$work/a.out")"
echo "nobody (outside MPS): $(cat "$work/b.out")"
grep -qE "TFLOP/s|cuda kernel" "$work/b.out" || bad "nobody's program did not run beside root's MPS server"
env "${a_env[@]}" "$bin" epilog || bad "epilog (root) failed"
env "${b_env[@]}" "$bin" epilog || bad "epilog (nobody) failed"
grep -E '"job_id":"90000[45]"' "$work/accounting.jsonl"
grep -E '"job_id":"900005".*"outside_mps":true' "$work/accounting.jsonl" >/dev/null \
  || bad "nobody's record does not say outside_mps"
echo "SM clock after the Epilogs: $(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -i 0)"

echo
if [ "$failed" = 0 ]; then echo "gpu-check: every step worked"; else echo "gpu-check: some steps were refused or failed (marked !!)"; fi
exit "$failed"
