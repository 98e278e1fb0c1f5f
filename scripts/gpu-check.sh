#!/usr/bin/env bash
# What heshare's node helper can do with this machine's NVIDIA GPU, checked for real.
#
#   HESHARE_GPU_CHECK_OUT=DIR scripts/gpu-check.sh [HESHARE_BINARY]          (as root)
#
# Two modes, by HESHARE_GPU_CHECK:
#   read-only (default)  changes NO setting of any GPU: no locked clocks, no power limits, no
#                        accounting, persistence, compute or MIG mode change, no reset. It only
#                        reads (NVML facts, energy counter, power, clocks, modes as they are),
#                        starts and stops MPS daemons and CUDA programs of its own, and runs the
#                        node helper with `[node] gpu_settings = "read-only"`, which reports the
#                        clock it would lock instead of locking it. For a shared card.
#   full                 also tries a locked clock and its reset (`heshare node gpus --try-lock`)
#                        and lets the helper lock the clocks it picks and turn accounting mode on
#                        (which stays on until the driver reloads). For a site's own GPU node.
#
# Steps: 1 nvidia-smi, 2 NVML through heshare, 3 an MPS daemon of its own, 4 a CUDA program
# under a 30% MPS share, 5 the helper's prolog/task-prolog/epilog with the NVML backend, 6 the
# measured split of a busy and a mostly idle job under MPS (sampled while they run), 7 another
# user's share beside root's MPS server (outside MPS, time-sliced). A fact preamble comes first
# and a PASS/FAIL/SKIPPED line per step last. Everything it wrote (facts, each step's output,
# MPS control and server logs, helper.log, state, records) is copied into DIR before cleanup
# (default: ./gpu-check-YYYYmmdd-HHMMSS). Every workload and wait runs under `timeout`
# (HESHARE_GPU_CHECK_TIMEOUT seconds, default 120); every MPS daemon it started is stopped.
#
# It never runs cargo: HESHARE_BINARY (default target/release/heshare) is a heshare built
# elsewhere, e.g. on Debian 12 (it needs glibc >= 2.34 and loads NVML at run time).
# Exit status: 0 when no step failed (skipped steps say why), 1 when a step failed, 2 when the
# binary is missing or the mode unknown.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${HESHARE_GPU_CHECK:-read-only}
case "$mode" in read-only|full) ;; *) echo "gpu-check: HESHARE_GPU_CHECK=$mode: use read-only or full" >&2; exit 2 ;; esac
bin=${1:-target/release/heshare}
[ -x "$bin" ] || { echo "gpu-check: no heshare binary at $bin: build it elsewhere (cargo build --release on Debian 12) and pass its path; this script never runs cargo" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
out=${HESHARE_GPU_CHECK_OUT:-$PWD/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
limit=${HESHARE_GPU_CHECK_TIMEOUT:-120}
ldlp=${LD_LIBRARY_PATH:-}
work=$(mktemp -d /tmp/heshare-gpu-check.XXXXXX); export work
chmod 0711 "$work"

results=()     # "STEP|STATUS|why"
status_of=()   # per step, for skip decisions
result() { results+=("$1|$2|$3"); status_of[$1]=$2; echo "-> step $1: $2${3:+: $3}"; }
step() { echo; echo "== $1. $2"; }
# Long output goes to the archive; the console gets its first lines.
show() { local f=$1 n=${2:-15}; head -n "$n" "$f" | cut -c1-200; [ "$(wc -l < "$f")" -gt "$n" ] && echo "   ... (whole output: $(basename "$f") in the archive)"; true; }

# Every MPS daemon this run started: its pipe directory. The helper's are under $work/run-mps.
own_pipes=()
mps=""
stop_daemons() {
  local p
  for p in "${own_pipes[@]}" "$work"/run-mps/*/gpu*; do
    [ -e "$p/control" ] || continue
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 20 "${mps:-nvidia-cuda-mps-control}" >/dev/null 2>&1
  done
}
cleanup() {
  # Background samplers and workloads first, then the daemons, then what they left behind.
  jobs -p | xargs -r kill 2>/dev/null
  stop_daemons
  if [ "$mode" = full ] && [ -f "$work/heshare.toml" ]; then
    HESHARE_CONFIG=$work/heshare.toml timeout 30 "$bin" node repair --node gpucheck >/dev/null 2>&1
  fi
  for d in state run-mps log-mps mps-log accounting.jsonl; do
    [ -e "$work/$d" ] && cp -a "$work/$d" "$out/" 2>/dev/null
  done
  cp "$work"/*.out "$work"/*.txt "$work/heshare.toml" "$out/" 2>/dev/null
  rmdir /sys/fs/cgroup/heshare-gpu-check/job_* /sys/fs/cgroup/heshare-gpu-check 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "gpu-check: mode $mode, binary $bin, archive $out"
[ "$mode" = read-only ] && echo "gpu-check: read-only: no GPU setting is changed by this run"

step 0 "facts"
{
  echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") kernel $(uname -r)"
  echo "glibc: $(ldd --version 2>/dev/null | head -1)"
  echo "heshare: $("$bin" --version 2>&1) ($(ldd "$bin" 2>&1 | grep -c 'not found') libraries not found)"
  echo "id: $(id)"
  echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-(unset)}"
  for lib in libnvidia-ml.so.1 libcuda.so.1; do
    where=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
    if [ -z "$where" ]; then
      for d in ${ldlp//:/ } /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$lib" ] && { where="$d/$lib (not in ldconfig's cache)"; break; }
      done
    fi
    echo "$lib: ${where:-not found}"
  done
  for p in $(command -v nvidia-cuda-mps-control 2>/dev/null) /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control \
           $(command -v nvidia-cuda-mps-server 2>/dev/null) /usr/local/nvidia/bin/nvidia-cuda-mps-server /usr/bin/nvidia-cuda-mps-server; do
    [ -e "$p" ] && echo "mps binary: $p $(stat -Lc '%U:%G %a' "$p")"
  done | sort -u
  echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup 2>/dev/null); /proc/self/cgroup: $(tr '\n' ' ' < /proc/self/cgroup)"
  echo "nobody: $(id nobody 2>&1)"
  echo "python torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "nvcc: $(command -v nvcc || echo none)"
} > "$work/facts.txt" 2>&1
cat "$work/facts.txt"
result 0 PASS ""

# The MPS control program: PATH, then where a read-only driver mount puts it.
for p in "$(command -v nvidia-cuda-mps-control 2>/dev/null)" /usr/local/nvidia/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control; do
  [ -n "$p" ] && [ -x "$p" ] && { mps=$p; break; }
done
# Library directories for the daemons the helper starts (its environment is made from nothing):
# those of LD_LIBRARY_PATH that hold libcuda.
libpath=()
for d in ${ldlp//:/ }; do [ -e "$d/libcuda.so.1" ] && libpath+=("\"$d\""); done

step 1 "nvidia-smi"
driver=0
if ! command -v nvidia-smi >/dev/null; then
  result 1 SKIPPED "no nvidia-smi: no NVIDIA driver here"
elif timeout "$limit" nvidia-smi --query-gpu=index,name,driver_version,power.draw,power.limit,clocks.sm,clocks.max.sm,compute_mode,persistence_mode,accounting.mode,mig.mode.current --format=csv > "$work/1-nvidia-smi.txt" 2>&1; then
  show "$work/1-nvidia-smi.txt" 10
  driver=1
  result 1 PASS ""
else
  show "$work/1-nvidia-smi.txt" 5
  result 1 SKIPPED "nvidia-smi found no usable driver"
fi
nodriver="no NVIDIA driver (step 1)"

step 2 "NVML through heshare (heshare node gpus$([ "$mode" = full ] && echo " --try-lock"))"
if [ "$driver" = 0 ]; then
  result 2 SKIPPED "$nodriver"
else
  args=(node gpus); [ "$mode" = full ] && args+=(--try-lock)
  if timeout "$limit" "$bin" "${args[@]}" > "$work/2-node-gpus.txt" 2>&1; then
    show "$work/2-node-gpus.txt" 14; result 2 PASS ""
  else
    show "$work/2-node-gpus.txt" 14; result 2 FAIL "heshare node gpus failed"
  fi
fi

# A small CUDA workload, ~6 s of matrix multiplies; WORK_DUTY (0..1, default 1) is the fraction
# of the time it keeps the GPU busy.
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
  elif [ -x "$work/spin" ]; then
    "$work/spin"
  else
    echo "no CUDA program to run"; return 1
  fi
}
cuda=0
if [ "$driver" = 1 ]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    cuda=1
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
    timeout "$limit" nvcc -O2 -o "$work/spin" "$work/spin.cu" > "$work/nvcc.txt" 2>&1 && chmod 0755 "$work/spin" && cuda=1
  fi
fi
nocuda="no CUDA program (no PyTorch with CUDA, no nvcc)"
nomps="nvidia-cuda-mps-control not found (looked in PATH, /usr/local/nvidia/bin, /usr/bin)"

step 3 "an MPS control daemon of its own on GPU 0"
if [ "$driver" = 0 ]; then result 3 SKIPPED "$nodriver"
elif [ -z "$mps" ]; then result 3 SKIPPED "$nomps"
else
  mkdir -p "$work/mps-pipe" "$work/mps-log"; own_pipes+=("$work/mps-pipe")
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  if CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID timeout "$limit" "$mps" -d > "$work/3-mps.txt" 2>&1; then
    sleep 1
    echo "get_server_list: $(echo get_server_list | timeout 20 "$mps" 2>&1)" | tee -a "$work/3-mps.txt"
    result 3 PASS ""
  else
    show "$work/3-mps.txt" 5; result 3 FAIL "$mps -d failed"
  fi
fi

step 4 "a CUDA program under a 30% MPS share"
if [ "${status_of[3]}" != PASS ]; then result 4 SKIPPED "no MPS daemon (step 3)"
elif [ "$cuda" = 0 ]; then result 4 SKIPPED "$nocuda"
else
  if CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 timeout "$limit" bash -c "$(declare -f workload); workload" > "$work/4-cuda.out" 2>&1; then
    show "$work/4-cuda.out" 3; ok=1
  else
    show "$work/4-cuda.out" 5; ok=0
  fi
  echo "servers: $(echo get_server_list | timeout 20 "$mps" 2>&1)"
  echo quit | timeout 20 "$mps" >/dev/null 2>&1
  sleep 1
  if echo get_server_list | timeout 20 "$mps" >/dev/null 2>&1; then result 4 FAIL "the MPS daemon did not quit"
  elif [ "$ok" = 1 ]; then result 4 PASS ""
  else result 4 FAIL "the CUDA program did not run under MPS"; fi
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

# The helper's configuration: NVML, everything under $work, clocks and accounting mode left
# alone in read-only mode.
gpu_type=$(sed -n 's/^GPU 0: .*(catalog: \([a-z0-9._-]*\))$/\1/p' "$work/2-node-gpus.txt" 2>/dev/null)
# A GPU the catalog lacks (e.g. H200) is checked as its nearest catalog type.
[ -n "$gpu_type" ] || gpu_type=h100
settings=manage; [ "$mode" = read-only ] && settings=read-only
{ cat slurm-conf/heshare.toml
  printf '\n[node]\nbackend = "nvml"\nstate_dir = "%s"\naccounting_log = "%s"\nmps_control = "%s"\nmps_pipe_dir = "%s"\nmps_log_dir = "%s"\ngpu_type = "%s"\ngpu_settings = "%s"\nmps_library_path = [%s]\n' \
    "$work/state" "$work/accounting.jsonl" "${mps:-/usr/bin/nvidia-cuda-mps-control}" \
    "$work/run-mps" "$work/log-mps" "$gpu_type" "$settings" "$(IFS=,; echo "${libpath[*]}")"; } > "$work/heshare.toml"
export HESHARE_CONFIG=$work/heshare.toml
# The environment slurmd gives a job's Prolog on GPU 0 of node gpucheck, one VAR=value a line:
# prolog_env JOBID USER UID SHARE_PCT CLASS
prolog_env() {
  printf '%s\n' "SLURM_JOB_ID=$1" "SLURM_JOB_USER=$2" "SLURM_JOB_UID=$3" SLURMD_NODENAME=gpucheck \
    SLURM_JOB_GPUS=0 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$4" "SPANK_HESHARE_CLASS=$5"
}
hook() { # HOOK ENV-ARRAY-NAME: runs the helper hook with the job's environment, under timeout
  local -n e=$2
  env "${e[@]}" timeout "$limit" "$bin" "$1"
}
clock_now() { nvidia-smi --query-gpu=clocks.sm --format=csv,noheader -i 0 2>/dev/null; }

step 5 "the helper's prolog / task-prolog / epilog with the NVML backend ($settings)"
if [ "$driver" = 0 ]; then result 5 SKIPPED "$nodriver"
elif [ -z "$mps" ]; then result 5 SKIPPED "$nomps"
elif [ "$cuda" = 0 ]; then result 5 SKIPPED "$nocuda"
else
  fail=""
  mapfile -t job_env < <(prolog_env 900001 root 0 30 vit-infer)
  t0=$(date +%s%N)
  hook prolog job_env > "$work/5-hooks.out" 2>&1 || fail="prolog failed"
  echo "prolog: $(( ($(date +%s%N) - t0) / 1000000 )) ms; SM clock during the job: $(clock_now)"
  exports=$(hook task-prolog job_env) || fail="task-prolog failed"
  echo "$exports" | head -5
  ( eval "$exports"; timeout "$limit" bash -c "$(declare -f workload); workload" ) > "$work/5-cuda.out" 2>&1 \
    || fail="${fail:-the CUDA program did not run under the MPS daemon of the helper}"
  show "$work/5-cuda.out" 2
  t0=$(date +%s%N)
  hook epilog job_env >> "$work/5-hooks.out" 2>&1 || fail="${fail:-epilog failed}"
  echo "epilog: $(( ($(date +%s%N) - t0) / 1000000 )) ms; SM clock after: $(clock_now)"
  grep '"job_id":"900001"' "$work/accounting.jsonl" 2>/dev/null | cut -c1-600 || fail="${fail:-no record}"
  timeout "$limit" "$bin" report "$work/accounting.jsonl" --by job > "$work/5-report.txt" 2>&1 || fail="${fail:-report failed}"
  show "$work/5-report.txt" 6
  grep -h "would\|refused\|clock" "$work/state/gpucheck/helper.log" 2>/dev/null | tail -3 | cut -c1-300
  if [ -n "$fail" ]; then result 5 FAIL "$fail"; else result 5 PASS ""; fi
fi

step 6 "measured split: a busy and a mostly idle job on GPU 0 under MPS, sampled while they run"
if [ "${status_of[5]}" != PASS ]; then result 6 SKIPPED "the helper did not run jobs (step 5)"
else
  # Each workload in a cgroup named as slurmstepd names a job's, so the helper ties processes to
  # jobs; without a writable cgroup2 tree it ties them by owner or falls back to the model.
  cg=/sys/fs/cgroup/heshare-gpu-check
  in_job_cgroup() {  # JOBID COMMAND...
    local id=$1; shift
    if mkdir -p "$cg/job_$id" 2>/dev/null; then
      sh -c 'echo $$ > "$1/cgroup.procs" 2>/dev/null || echo "(not moved into $1)"; shift; exec "$@"' sh "$cg/job_$id" "$@"
    else
      "$@"
    fi
  }
  fail=""
  mapfile -t busy_env < <(prolog_env 900002 root 0 50 vit-infer)
  mapfile -t idle_env < <(prolog_env 900003 root 0 50 bert-train)
  { hook prolog busy_env && hook prolog idle_env; } > "$work/6-hooks.out" 2>&1 || fail="prolog failed"
  ex_busy=$(hook task-prolog busy_env); ex_idle=$(hook task-prolog idle_env)
  ( eval "$ex_busy"; export WORK_DUTY=1; in_job_cgroup 900002 timeout "$limit" bash -c "$(declare -f workload); workload" ) > "$work/6-busy.out" 2>&1 &
  p1=$!
  ( eval "$ex_idle"; export WORK_DUTY=0.2; in_job_cgroup 900003 timeout "$limit" bash -c "$(declare -f workload); workload" ) > "$work/6-idle.out" 2>&1 &
  p2=$!
  samples=0
  while kill -0 "$p1" 2>/dev/null || kill -0 "$p2" 2>/dev/null; do
    timeout 20 "$bin" node sample --node gpucheck >> "$work/6-samples.out" 2>&1 && samples=$((samples + 1))
    sleep 1
  done
  wait "$p1" || fail="${fail:-the busy workload failed}"
  wait "$p2" || fail="${fail:-the idle workload failed}"
  echo "node sample ran $samples times while the jobs ran"
  { hook epilog busy_env && hook epilog idle_env; } >> "$work/6-hooks.out" 2>&1 || fail="${fail:-epilog failed}"
  echo "NVML's own per-process accounting (as the card's accounting mode allows):"
  timeout 20 nvidia-smi --query-accounted-apps=pid,gpu_util,mem_util,max_memory_usage,time --format=csv -i 0 2>&1 | head -6
  # Read-only never turns accounting mode on: where it is off the split must say "model".
  expect=measured
  [ "$mode" = read-only ] && grep -q "accounting off" "$work/2-node-gpus.txt" && expect=model
  python3 - "$work/accounting.jsonl" "$expect" <<'PY' > "$work/6-split.txt" 2>&1 || fail="${fail:-the split did not come out as expected (see above)}"
import json, sys
recs = {r["job_id"]: r for r in map(json.loads, open(sys.argv[1])) if r.get("job_id") in ("900002", "900003")}
b, i = recs["900002"], recs["900003"]
print(f"busy job (claims vit-infer): {b['energy_j']:.0f} J, basis {b['basis']}; "
      f"mostly idle job (claims bert-train): {i['energy_j']:.0f} J, basis {i['basis']}")
if sys.argv[2] == "model":
    ok = b["basis"] == "model" and i["basis"] == "model"
    print("accounting mode is off and read-only left it off: the split is the model's, as it must be" if ok
          else "accounting mode is off, yet the split claims a measurement")
else:
    ok = b["basis"] in ("measured", "mixed") and b["energy_j"] > i["energy_j"]
    print("measured split holds" if ok else "measured split does NOT hold (basis model: per-process work was not measured)")
sys.exit(0 if ok else 1)
PY
  cat "$work/6-split.txt"
  if [ -n "$fail" ]; then result 6 FAIL "$fail"; else result 6 PASS ""; fi
fi

step 7 "another user's share beside root's MPS server: outside MPS, time-sliced"
if [ "${status_of[5]}" != PASS ]; then result 7 SKIPPED "the helper did not run jobs (step 5)"
elif ! id nobody >/dev/null 2>&1; then result 7 SKIPPED "no user nobody"
else
  fail=""
  echo "compute mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader -i 0)"
  mapfile -t a_env < <(prolog_env 900004 root 0 50 bert-train)
  mapfile -t b_env < <(prolog_env 900005 nobody 65534 50 bert-train)
  { hook prolog a_env && hook prolog b_env; } > "$work/7-hooks.out" 2>&1 || fail="prolog failed"
  ex_a=$(hook task-prolog a_env); ex_b=$(hook task-prolog b_env)
  echo "nobody's task-prolog: $(echo "$ex_b" | tr '\n' ' ' | cut -c1-300)"
  echo "$ex_b" | grep -q "runs outside MPS" || fail="nobody's job was not run outside MPS"
  # TaskProlog's own words: export/unset lines for the shell, print lines for the job's output.
  shell_of() { grep -E '^(export|unset) '; }
  ( eval "$(echo "$ex_a" | shell_of)"; timeout "$limit" bash -c "$(declare -f workload); workload" ) > "$work/7-root.out" 2>&1 &
  p1=$!
  sleep 1
  # nobody keeps the library path the driver needs here (the job would get it from its site).
  runuser -u nobody -- env -i PATH="$PATH" HOME=/ work="$work" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" timeout "$limit" bash -c \
    "$(echo "$ex_b" | shell_of); $(declare -f workload); workload" > "$work/7-nobody.out" 2>&1 &
  p2=$!
  sleep 2
  echo "MPS servers while both run: $(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$work/run-mps/gpucheck/gpu0 timeout 20 "$mps" 2>&1 | tr '\n' ' ')"
  timeout 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv -i 0 2>&1 | head -5
  wait "$p1"; wait "$p2"
  echo "root (MPS client): $(head -c 300 "$work/7-root.out")"
  echo "nobody (outside MPS): $(head -c 300 "$work/7-nobody.out")"
  grep -qE "TFLOP/s|cuda kernel" "$work/7-nobody.out" || fail="${fail:-the program of nobody did not run beside the MPS server of root}"
  { hook epilog a_env && hook epilog b_env; } >> "$work/7-hooks.out" 2>&1 || fail="${fail:-epilog failed}"
  grep -qE '"job_id":"900005".*"outside_mps":true' "$work/accounting.jsonl" || fail="${fail:-the record of nobody does not say outside_mps}"
  echo "SM clock after the Epilogs: $(clock_now)"
  if [ -n "$fail" ]; then result 7 FAIL "$fail"; else result 7 PASS ""; fi
fi

if [ -f "$work/state/gpucheck/helper.log" ]; then
  echo; echo "== helper.log (last lines; whole in the archive)"; tail -n 8 "$work/state/gpucheck/helper.log" | cut -c1-300
fi
[ "$mode" = read-only ] && [ -f "$work/state/gpucheck/helper.log" ] && {
  echo "what the full mode would have set:"; grep -o 'would [^(]*' "$work/state/gpucheck/helper.log" | sort | uniq -c | head -5; }

echo
echo "== summary (mode $mode; archive $out)"
failed=0
for r in "${results[@]}"; do
  IFS='|' read -r n st why <<< "$r"
  printf 'step %s: %-7s %s\n' "$n" "$st" "$why"
  [ "$st" = FAIL ] && failed=1
done | tee "$work/summary.txt"
grep -q ": FAIL" "$work/summary.txt" && failed=1
exit "$failed"
