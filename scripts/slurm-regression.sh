#!/usr/bin/env bash
# Slurm's own regression tests, run against the local cluster twice: once plain, once with
# heshare loaded (job_submit plugin and SPANK options in slurmctld and the clients, node helper
# as Prolog, Epilog and TaskProlog). A test that passes plain must pass with heshare; the script
# prints both outcomes of every test that differs and exits 1 if heshare broke one.
#
#   scripts/slurm-regression.sh SLURM_SOURCE [pytest|expect|all]
#
# SLURM_SOURCE is a checkout of Slurm at the installed version (for Debian 12:
# `git clone -b slurm-22-05-8-1 https://github.com/SchedMD/slurm`); only its testsuite/ is
# read. Needs root, a release build (target/release/heshare and libheshare.so), and for the
# python suite python3-pytest and python3-pexpect, for the expect suite `expect`. The python
# suite runs in Slurm's local-config mode (the cluster as it is; tests that must rewrite
# slurm.conf skip); the expect suite runs the tests that exercise GRES/GPU/MPS, job arrays,
# holds and nice, with a deadline of $HESHARE_REGRESSION_TIMEOUT seconds each (default 300).
set -uo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/slurm-regression.sh SLURM_SOURCE [pytest|expect|all]}
what=${2:-all}
src=$(cd "$src" && pwd) || exit 2
[ -d "$src/testsuite/python/tests" ] || { echo "$src/testsuite/python/tests: not a Slurm source tree" >&2; exit 2; }
case $what in pytest|expect|all) ;; *) echo "unknown suite: $what" >&2; exit 2 ;; esac
for f in target/release/heshare target/release/libheshare.so; do
  [ -e "$f" ] || { echo "$f: missing (cargo build --release)" >&2; exit 2; }
done
per_test=${HESHARE_REGRESSION_TIMEOUT:-300}
py=/usr/bin/python3
work=$(mktemp -d /tmp/heshare-regression.XXXXXX)
keep=0  # set when a test broke: its logs stay for reading
trap 'for c in plain heshare; do bash scripts/local-slurm.sh stop "$work/$c" >/dev/null 2>&1; done; [ "$keep" = 1 ] || rm -rf "$work"' EXIT

start() {  # NAME PORT [ENV...]
  local name=$1 port=$2; shift 2
  env HESHARE_SLURM_PORT="$port" "$@" bash scripts/local-slurm.sh start "$work/$name" >"$work/$name.start" 2>&1 \
    || { cat "$work/$name.start"; echo "cannot start the $name cluster" >&2; exit 2; }
  printf 'SlurmSourceDir=%s\nSlurmBuildDir=%s\nSlurmInstallDir=/usr\nSlurmConfigDir=%s\n' \
    "$src" "$src" "$work/$name/etc" > "$work/$name.testsuite.conf"
}

# One line per test, "OUTCOME TEST", in $work/NAME.outcomes.
run_pytest() {  # NAME
  local name=$1
  ( cd "$src/testsuite/python" && SLURM_CONF=$work/$name/etc/slurm.conf \
      SLURM_TESTSUITE_CONF=$work/$name.testsuite.conf \
      timeout 3600 "$py" -m pytest tests -p no:cacheprovider -q -rA ) > "$work/$name.pytest.log" 2>&1
  grep -E '^(PASSED|FAILED|ERROR|SKIPPED) ' "$work/$name.pytest.log" \
    | sed -E 's/ - .*//; s/^SKIPPED \[[0-9]+\] /SKIPPED /' | awk '{print $1, "pytest:" $2}' >> "$work/$name.outcomes"
}

expect_tests() {
  ( cd "$src/testsuite/expect" && grep -l -E -- '--gres|mps|--array|scontrol hold|--hold|--nice|nice=' test* 2>/dev/null \
      | grep -E '^test[0-9]+\.[0-9]+$' | sort -V )
}

run_expect() {  # NAME
  local name=$1 t rc out
  for t in $(expect_tests); do
    out=$(cd "$src/testsuite/expect" && SLURM_CONF=$work/$name/etc/slurm.conf \
            SLURM_TESTSUITE_CONF=$work/$name.testsuite.conf timeout "$per_test" expect "./$t" 2>&1)
    rc=$?
    if grep -q "^SUCCESS *: $t" <<<"$out"; then echo "PASSED expect:$t"
    elif grep -qE "^SKIPPED *: $t" <<<"$out"; then echo "SKIPPED expect:$t"
    elif [ "$rc" = 124 ]; then echo "TIMEOUT expect:$t"
    else echo "FAILED expect:$t"
    fi
    printf '%s\n' "$out" > "$work/$name.$t.log"
    # A test that left jobs behind must not hold up the next.
    SLURM_CONF=$work/$name/etc/slurm.conf scancel --full --quiet --user=root 2>/dev/null
  done >> "$work/$name.outcomes"
}

start plain 18817
start heshare 18857 HESHARE_PLUGIN="$PWD/target/release/libheshare.so" \
  HESHARE_NODE_HELPER="$PWD/target/release/heshare"
: > "$work/plain.outcomes"; : > "$work/heshare.outcomes"
for name in plain heshare; do
  if [ "$what" != expect ]; then run_pytest "$name"; fi
  if [ "$what" != pytest ]; then run_expect "$name"; fi
done

summary() { awk '{print $1}' "$1" | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}'; echo; }
echo "without heshare: $(summary "$work/plain.outcomes")"
echo "with heshare:    $(summary "$work/heshare.outcomes")"
broke=0
while read -r outcome test; do
  theirs=$(awk -v t="$test" '$2 == t {print $1}' "$work/heshare.outcomes")
  [ "$outcome" = "${theirs:-MISSING}" ] && continue
  echo "differs: $test: without heshare $outcome, with heshare ${theirs:-MISSING}"
  if [ "$outcome" = PASSED ]; then broke=1; fi
done < "$work/plain.outcomes"
if [ "$broke" = 0 ]; then
  echo "slurm-regression: every test that passes without heshare passes with it"
else
  keep=1
  echo "slurm-regression: heshare broke tests that pass without it (logs kept in $work)"
fi
exit "$broke"
