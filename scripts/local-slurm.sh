#!/usr/bin/env bash
# A real, heterogeneous Slurm cluster on this one machine, for heshare's tests and for admins who
# want to try heshare before touching a production cluster.
#
#   scripts/local-slurm.sh start [DIR]   start munge (if not running), slurmctld and its slurmd
#   scripts/local-slurm.sh stop  [DIR]   stop everything this script started, then remove DIR
#   scripts/local-slurm.sh env   [DIR]   print the export line clients need (SLURM_CONF)
#   scripts/local-slurm.sh restart-ctld [DIR]   stop slurmctld (SIGTERM) and start it on its state
#   scripts/local-slurm.sh stop-dbd|start-dbd [DIR]   stop or start slurmdbd alone (HESHARE_SLURMDBD=1)
#
# DIR defaults to $HESHARE_SLURM_DIR or /tmp/heshare-slurm. Needs root (fake GPUs are device
# nodes, slurmd runs as root) and Debian's slurm-wlm and munge packages. The nodes:
#   ha100: 2 x a100, gres/mps 200        hv100: 2 x v100m16        ht4: 4 x t4, gres/mps 400
# Each node carries its GPU type as a feature (so heshare may offer a job several types), and
# gres/mps may use every GPU of a node (Flags=all_sharing). Fake GPUs are character devices
# (slurmd refuses plain files); ports come from $HESHARE_SLURM_PORT (default 17817: slurmctld, +1..
# for each slurmd). $HESHARE_SLURMCTLD_PARAMETERS, if set, becomes SlurmctldParameters=.
# Priorities are priority/multifactor, recomputed every minute, which adds the site factor heshare
# sets (the age and fair-share weights need slurmdbd, which this cluster runs only on request);
# HESHARE_PRIORITY=basic gives Slurm's default instead.
# With HESHARE_PLUGIN=path/to/libheshare.so the cluster loads it as job_submit/heshare, with
# $HESHARE_CONFIG (default: the repository's slurm-conf/heshare.toml) as its configuration, and
# builds c_shim/spank_heshare.c as the SPANK plugin for the heshare sbatch options; with
# HESHARE_JOB_SUBMIT_LUA=file.lua Slurm's job_submit/lua runs that script before heshare.
# With HESHARE_NODE_HELPER=path/to/heshare the nodes run it as Prolog, Epilog and TaskProlog,
# with the MODEL GPU backend (the fake GPUs have no driver) and its state, MPS directories and
# accounting log ($DIR/log/accounting.jsonl) under DIR; its config is $DIR/etc/heshare-node.toml.
# HESHARE_OTHER_USER_SHARE=wait|time-slice sets the helper's [node] other_user_share.
# HESHARE_MPS_CONTROL=program makes that program (copied to $DIR/lib, root-owned, 0755) the
# helper's MPS control program: tests/fixtures/stand-in-mps-control where there is no driver.
# With HESHARE_SLURMDBD=1 the cluster keeps accounting: a MariaDB server of its own (Debian's
# mariadb-server, data under DIR/db, reached on a socket under DIR/run, no network) and slurmdbd
# (port $HESHARE_SLURM_PORT+4), so that sacct and sacctmgr work against it.
# HESHARE_SLURM_SHAPE=testsuite gives instead the cluster Slurm's own Python GRES tests ask for
# (tests/features/gres: two nodes of 6 CPUs, each `Gres=gpu:1,mps:100` untyped, gres.conf
# `Name=gpu File=/dev/tty0` and `Name=mps Count=100`), for scripts/slurm-regression.sh.
set -euo pipefail

cmd=${1:-}
dir=${2:-${HESHARE_SLURM_DIR:-/tmp/heshare-slurm}}
port=${HESHARE_SLURM_PORT:-17817}
conf="$dir/etc/slurm.conf"
shape=${HESHARE_SLURM_SHAPE:-hetero}
case "$shape" in
  hetero) nodes=(ha100 hv100 ht4) ;;
  testsuite) nodes=(ts1 ts2) ;;
  *) echo "local-slurm: HESHARE_SLURM_SHAPE=$shape: use hetero or testsuite" >&2; exit 1 ;;
esac

die() { echo "local-slurm: $*" >&2; exit 1; }

need() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (fake GPU device nodes, slurmd)"
  for b in slurmctld slurmd munged munge scontrol sinfo; do
    command -v "$b" >/dev/null || die "$b not found: install the Debian packages slurm-wlm and munge"
  done
}

munge_ok() { [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; }

# Several clusters (parallel tests) share one munged. Under a lock, each registers its DIR; the
# munged this script started stops when the last registered cluster stops.
munge_lock=/run/heshare-munge.lock
munge_users=/run/heshare-munge.users

start_munge() {
  exec 9>"$munge_lock"
  flock 9
  install -d "$munge_users"
  echo "$dir" > "$munge_users/$(echo "$dir" | md5sum | cut -c1-16)"
  # A live socket that encodes a credential, not a process name: a dead munged can linger as a
  # zombie that pgrep still finds.
  if ! munge_ok; then
    install -d -o munge -g munge -m 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
      install -d -o munge -g munge -m 0700 /etc/munge
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
      chown munge:munge /etc/munge/munge.key
      chmod 0400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged --force
    touch "$munge_users/.started-by-heshare"
    local ok=0
    for _ in $(seq 50); do munge_ok && { ok=1; break; }; sleep 0.1; done
    [ "$ok" -eq 1 ] || { flock -u 9; die "munged did not start (no working /run/munge/munge.socket.2)"; }
  fi
  flock -u 9
}

stop_munge() {
  exec 9>"$munge_lock"
  flock 9
  rm -f "$munge_users/$(echo "$dir" | md5sum | cut -c1-16)"
  if [ -e "$munge_users/.started-by-heshare" ] && [ -z "$(ls "$munge_users")" ]; then
    # By its pid file, not by name: a munged of another root on this machine is not ours.
    [ -s /run/munge/munged.pid ] && kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f "$munge_users/.started-by-heshare"
  fi
  flock -u 9
}

dbd=${HESHARE_SLURMDBD:-0}
dbd_port=$((port + 4))

accounting_lines() {
  if [ "$dbd" = 1 ]; then
    # GRES are accounted (in sacct's AllocTRES and ReqTRES) only where listed, typed ones by
    # name: what `heshare simulate --trace-format sacct` replays a site's jobs from.
    printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=%s\nAccountingStorageTRES=gres/gpu,gres/mps,gres/gpu:a100,gres/gpu:v100m16,gres/gpu:t4\nJobAcctGatherType=jobacct_gather/none' "$dbd_port"
  else
    printf 'AccountingStorageType=accounting_storage/none'
  fi
}

# Stops slurmdbd alone (SIGTERM): slurmctld keeps the jobs' records for it meanwhile.
stop_slurmdbd() {
  local pid
  pid=$(head -n1 "$dir/run/slurmdbd.pid" 2>/dev/null) || die "no slurmdbd in $dir"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  die "slurmdbd $pid did not stop"
}

# MariaDB and slurmdbd for this cluster alone. slurmdbd reaches the server as root over the
# socket (MariaDB's unix_socket authentication: no password anywhere); the MariaDB client library
# in slurmdbd takes the socket from MYSQL_UNIX_PORT for StorageHost=localhost.
start_dbd() {
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null \
    || die "HESHARE_SLURMDBD=1 needs Debian's mariadb-server"
  command -v slurmdbd >/dev/null && command -v sacctmgr >/dev/null \
    || die "HESHARE_SLURMDBD=1 needs Debian's slurmdbd and slurm-client"
  install -d -m 0700 "$dir/db"
  install -d "$dir/run" "$dir/log"
  mariadb-install-db --no-defaults --datadir="$dir/db" --user=root --skip-test-db \
    > "$dir/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (log: $dir/log/mariadb-install.log)"
  setsid mariadbd --no-defaults --datadir="$dir/db" --socket="$dir/run/mysql.sock" --skip-networking \
    --user=root --pid-file="$dir/run/mariadb.pid" --log-error="$dir/log/mariadb.log" \
    --innodb-buffer-pool-size=16M < /dev/null > /dev/null 2>&1 &
  local ok=0
  for _ in $(seq 150); do [ -S "$dir/run/mysql.sock" ] && { ok=1; break; }; sleep 0.2; done
  [ "$ok" -eq 1 ] || die "MariaDB did not start (log: $dir/log/mariadb.log)"
  # The database exists before slurmdbd first connects. slurmdbd otherwise connects, is told the
  # database is missing, creates it and connects again on the same handle, and with the client
  # library of MariaDB 11.8.9 (Debian 13 and unstable) that second connection refuses every
  # result ("Number of columns in result (=1) set exceeds maximum allowed number of columns
  # (=0)"): slurmdbd 24.11 and 26.05 then stop at their first query.
  mariadb --no-defaults --socket="$dir/run/mysql.sock" -u root -e "CREATE DATABASE IF NOT EXISTS heshare_acct" \
    || die "cannot create the accounting database (log: $dir/log/mariadb.log)"
  start_slurmdbd
}

start_slurmdbd() {
  cat > "$dir/etc/slurmdbd.conf" <<DBD
# Written by scripts/local-slurm.sh: this test cluster's accounting.
AuthType=auth/munge
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=heshare_acct
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
DBD
  chmod 0600 "$dir/etc/slurmdbd.conf"
  # slurmdbd reads slurmdbd.conf beside $SLURM_CONF.
  SLURM_CONF=$conf MYSQL_UNIX_PORT=$dir/run/mysql.sock slurmdbd
  ok=0
  for _ in $(seq 150); do
    SLURM_CONF=$conf sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1 && { ok=1; break; }
    sleep 0.2
  done
  [ "$ok" -eq 1 ] || die "slurmdbd did not answer (log: $dir/log/slurmdbd.log)"
  SLURM_CONF=$conf sacctmgr -n -P list cluster format=cluster | grep -qx heshare-local \
    || SLURM_CONF=$conf sacctmgr -i add cluster heshare-local >/dev/null \
    || die "sacctmgr could not add the cluster (log: $dir/log/slurmdbd.log)"
}

write_config() {
  install -d "$dir"/{etc,dev,log,run,state,spool}
  local i
  for i in $(seq 0 7); do
    [ -c "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 1 3
  done
  cat > "$conf" <<CONF
# Written by scripts/local-slurm.sh: a test cluster on one machine.
ClusterName=heshare-local
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/d%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,mps,shard
SchedulerType=sched/backfill
ReturnToService=2
JobCompType=jobcomp/none
$(accounting_lines)
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
CONF
  if [ "$shape" = testsuite ]; then
    cat >> "$conf" <<CONF
NodeName=ts1 NodeHostname=localhost Port=$((port + 1)) CPUs=6 RealMemory=4000 Gres=gpu:1,mps:100 State=UNKNOWN
NodeName=ts2 NodeHostname=localhost Port=$((port + 2)) CPUs=6 RealMemory=4000 Gres=gpu:1,mps:100 State=UNKNOWN
PartitionName=gpu Nodes=ts1,ts2 Default=YES MaxTime=INFINITE State=UP
CONF
  else
    cat >> "$conf" <<CONF
NodeName=ha100 NodeHostname=localhost Port=$((port + 1)) CPUs=4 RealMemory=4000 Gres=gpu:a100:2,mps:200 Features=a100 State=UNKNOWN
NodeName=hv100 NodeHostname=localhost Port=$((port + 2)) CPUs=4 RealMemory=4000 Gres=gpu:v100m16:2 Features=v100m16 State=UNKNOWN
NodeName=ht4 NodeHostname=localhost Port=$((port + 3)) CPUs=4 RealMemory=4000 Gres=gpu:t4:4,mps:400 Features=t4 State=UNKNOWN
PartitionName=gpu Nodes=ha100,hv100,ht4 Default=YES MaxTime=INFINITE State=UP
CONF
  fi
  [ -n "${HESHARE_SLURMCTLD_PARAMETERS:-}" ] && printf 'SlurmctldParameters=%s\n' "$HESHARE_SLURMCTLD_PARAMETERS" >> "$conf"
  case "${HESHARE_PRIORITY:-multifactor}" in
    multifactor) printf 'PriorityType=priority/multifactor\nPriorityCalcPeriod=1\n' >> "$conf" ;;
    basic) printf 'PriorityType=priority/basic\n' >> "$conf" ;;
    *) die "HESHARE_PRIORITY=$HESHARE_PRIORITY: use multifactor or basic" ;;
  esac
  if [ -n "${HESHARE_PLUGIN:-}" ]; then
    [ -f "$HESHARE_PLUGIN" ] || die "HESHARE_PLUGIN=$HESHARE_PLUGIN is not a file"
    nm -D --defined-only "$HESHARE_PLUGIN" | awk '{print $NF}' | grep -qx plugin_version \
      || die "$HESHARE_PLUGIN was built without Slurm headers (no plugin_version symbol): install libslurm-dev and rebuild"
    local sys
    sys=$(dirname "$(find /usr/lib -name select_cons_tres.so -print -quit)")
    install -d "$dir/lib"
    install -m 0755 "$HESHARE_PLUGIN" "$dir/lib/job_submit_heshare.so"
    local plugins=heshare
    if [ -n "${HESHARE_JOB_SUBMIT_LUA:-}" ]; then
      # Another job_submit plugin before heshare (Slurm's own Lua one), as many sites run.
      install -m 0644 "$HESHARE_JOB_SUBMIT_LUA" "$dir/etc/job_submit.lua"
      plugins=lua,heshare
    fi
    printf 'PluginDir=%s:%s\nJobSubmitPlugins=%s\nPlugStackConfig=%s\n' "$sys" "$dir/lib" "$plugins" "$dir/etc/plugstack.conf" >> "$conf"
    # The small SPANK plugin that gives sbatch --gpu-share/--gpu-class/--energy-policy: an
    # installed one ($HESHARE_SPANK_PLUGIN), or built here.
    if [ -n "${HESHARE_SPANK_PLUGIN:-}" ]; then
      install -m 0755 "$HESHARE_SPANK_PLUGIN" "$dir/lib/spank_heshare.so"
    else
      cc -shared -fPIC -O2 -o "$dir/lib/spank_heshare.so" "$(dirname "$0")/../c_shim/spank_heshare.c" \
        || die "cannot build c_shim/spank_heshare.c (needs a C compiler and libslurm-dev)"
    fi
    echo "required $dir/lib/spank_heshare.so" > "$dir/etc/plugstack.conf"
  fi
  # A Prolog that records what each job's Prolog sees (the plugin's SPANK_HESHARE_* entries),
  # then hands over to the node helper when there is one.
  local run_helper="exit 0"
  if [ -n "${HESHARE_NODE_HELPER:-}" ]; then
    [ -x "$HESHARE_NODE_HELPER" ] || die "HESHARE_NODE_HELPER=$HESHARE_NODE_HELPER is not an executable"
    local base=${HESHARE_CONFIG:-$(cd "$(dirname "$0")/.." && pwd)/slurm-conf/heshare.toml}
    grep -q '^\[node\]' "$base" && die "$base has a [node] table; the local cluster writes its own"
    install -d "$dir/lib"
    install -m 0755 "$HESHARE_NODE_HELPER" "$dir/lib/heshare"
    local mps_control=/usr/bin/nvidia-cuda-mps-control
    if [ -n "${HESHARE_MPS_CONTROL:-}" ]; then
      install -m 0755 "$HESHARE_MPS_CONTROL" "$dir/lib/mps-control"
      mps_control="$dir/lib/mps-control"
    fi
    # The model backend's type for each node's GPUs (the testsuite shape's are untyped in
    # Slurm: the helper models them as an a100 and a t4).
    local helper_types='ha100 = "a100", hv100 = "v100m16", ht4 = "t4"'
    [ "$shape" = testsuite ] && helper_types='ts1 = "a100", ts2 = "t4"'
    { cat "$base"; printf '\n[node]\nbackend = "model"\nstate_dir = "%s"\naccounting_log = "%s"\nmps_control = "%s"\nmps_pipe_dir = "%s"\nmps_log_dir = "%s"\nnode_gpu_types = { %s }\n' \
        "$dir/node-state" "$dir/log/accounting.jsonl" "$mps_control" "$dir/run/mps" "$dir/log/mps" "$helper_types"
      if [ -n "${HESHARE_OTHER_USER_SHARE:-}" ]; then printf 'other_user_share = "%s"\n' "$HESHARE_OTHER_USER_SHARE"; fi
    } > "$dir/etc/heshare-node.toml"
    run_helper="HESHARE_CONFIG=$dir/etc/heshare-node.toml exec $dir/lib/heshare"
    for hook in epilog task-prolog; do
      printf '#!/bin/sh\n%s %s\n' "$run_helper" "$hook" > "$dir/etc/$hook.sh"
      chmod 0755 "$dir/etc/$hook.sh"
    done
    printf 'Epilog=%s\nTaskProlog=%s\n' "$dir/etc/epilog.sh" "$dir/etc/task-prolog.sh" >> "$conf"
    run_helper="$run_helper prolog"
  fi
  cat > "$dir/etc/prolog.sh" <<PROLOG
#!/bin/sh
env | sort > "$dir/log/prolog-\$SLURM_JOB_ID.env"
$run_helper
PROLOG
  chmod 0755 "$dir/etc/prolog.sh"
  printf 'Prolog=%s\n' "$dir/etc/prolog.sh" >> "$conf"
  if [ "$shape" = testsuite ]; then
    [ -c /dev/tty0 ] || die "the testsuite shape needs /dev/tty0 (Slurm's GRES tests name it as the GPU)"
    printf 'AutoDetect=off\nName=gpu File=/dev/tty0\nName=mps Count=100\n' > "$dir/etc/gres.conf"
    return
  fi
  cat > "$dir/etc/gres.conf" <<GRES
AutoDetect=off
NodeName=ha100 Name=gpu Type=a100 File=$dir/dev/nvidia[0-1]
NodeName=ha100 Name=mps Count=200 File=$dir/dev/nvidia[0-1] Flags=all_sharing
NodeName=hv100 Name=gpu Type=v100m16 File=$dir/dev/nvidia[2-3]
NodeName=ht4 Name=gpu Type=t4 File=$dir/dev/nvidia[4-7]
NodeName=ht4 Name=mps Count=400 File=$dir/dev/nvidia[4-7] Flags=all_sharing
GRES
}

# The plugin reads these at init: the cluster's GPU types from slurm.conf, its policy from
# heshare.toml.
start_ctld() {
  SLURM_CONF=$conf HESHARE_CONFIG=${HESHARE_CONFIG:-$(cd "$(dirname "$0")/.." && pwd)/slurm-conf/heshare.toml} \
    slurmctld -f "$conf" "$@"
}

# Stops slurmctld (SIGTERM, as systemd does) and starts it again on its saved state.
restart_ctld() {
  local pid
  # First line only: slurmctld 24.11 rewrites its pid file on reconfigure (a new process) without
  # truncating it, so a shorter pid leaves a digit of the old one on a second line.
  pid=$(head -n1 "$dir/run/slurmctld.pid")
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && die "slurmctld $pid did not stop"
  start_ctld
  for _ in $(seq 100); do
    SLURM_CONF=$conf scontrol ping 2>/dev/null | grep -q UP && { echo "local-slurm: slurmctld restarted"; return; }
    sleep 0.2
  done
  die "slurmctld did not come back (log: $dir/log/slurmctld.log)"
}

start() {
  need
  [ -e "$dir/run/slurmctld.pid" ] && kill -0 "$(head -n1 "$dir/run/slurmctld.pid")" 2>/dev/null && die "already running in $dir"
  install -d "$dir/run"
  write_config
  start_munge
  [ "$dbd" = 1 ] && start_dbd
  start_ctld -i
  local n
  for n in "${nodes[@]}"; do
    slurmd -N "$n" -f "$conf"
  done
  for _ in $(seq 150); do
    if ! kill -0 "$(head -n1 "$dir/run/slurmctld.pid" 2>/dev/null || echo 0)" 2>/dev/null && [ -e "$dir/log/slurmctld.log" ] && grep -q "fatal" "$dir/log/slurmctld.log"; then
      grep -E "fatal|heshare" "$dir/log/slurmctld.log" >&2 || true
      die "slurmctld exited (log: $dir/log/slurmctld.log)"
    fi
    if [ "$(SLURM_CONF=$conf sinfo -h -N -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)')" -ge "${#nodes[@]}" ]; then
      echo "local-slurm: up in $dir (slurmctld on port $port); export SLURM_CONF=$conf"
      return
    fi
    sleep 0.2
  done
  SLURM_CONF=$conf sinfo -N -l >&2 || true
  tail -n 20 "$dir/log/slurmctld.log" >&2 || true
  die "nodes did not come up within 30 s (logs in $dir/log)"
}

stop() {
  [ -d "$dir" ] || return 0
  local f pid
  for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid" "$dir/run/slurmdbd.pid" "$dir/run/mariadb.pid"; do
    [ -e "$f" ] || continue
    pid=$(head -n1 "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  # Jobs' process groups started by these slurmd (slurmstepd) end with them.
  pkill -f "slurmstepd.*$dir" 2>/dev/null || true
  stop_munge
  rm -rf "$dir"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  restart-ctld) restart_ctld ;;
  stop-dbd) stop_slurmdbd ;;
  start-dbd) [ "$dbd" = 1 ] || die "start-dbd: the cluster runs slurmdbd only with HESHARE_SLURMDBD=1"; start_slurmdbd ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 start|stop|env|restart-ctld|stop-dbd|start-dbd [DIR]" ;;
esac
