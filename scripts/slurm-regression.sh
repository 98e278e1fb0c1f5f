#!/usr/bin/env bash
# Slurm's own regression tests, run against the local cluster twice: once plain, once with
# heshare loaded (job_submit plugin and SPANK options in slurmctld and the clients, node helper
# as Prolog, Epilog and TaskProlog, the bundled heshare.toml). Every test must give the same
# outcome both ways: the script prints each test whose outcome differs and exits 1 if any does.
#
#   scripts/slurm-regression.sh [SLURM_SOURCE] [gres|all]
#
# SLURM_SOURCE is a Slurm source tree at the installed version; only its testsuite/ is read.
# Without it, scripts/slurm-source.sh fetches Debian's source package of the installed Slurm
# into $HESHARE_SLURM_SOURCE_CACHE (default /var/cache/heshare-slurm-source).
#   gres (the default, what .ci/run runs): the Python tests that submit GPU or MPS work (on
#        22.05 tests/features/gres and tests/commands/sbatch's) on two clusters (the local
#        heterogeneous one, and the shape 22.05's MPS tests ask for: two alike nodes of
#        `Gres=gpu:1,mps:100`), and the expect tests 39.x (GPU) and 40.x (MPS) on the second:
#        they take the node a probe job landed on as the node every later job lands on, which
#        holds where the GPU nodes are alike and not where heshare picks a type among unlike
#        ones (on the heterogeneous cluster test39.5 failed different subtests with and without
#        heshare, each a job on another node than the probe's).
#   all: the whole Python suite (in local-config mode: tests that must rewrite slurm.conf skip)
#        and every expect test that exercises GRES/GPU/MPS, job arrays, holds and nice (hours).
# Needs root, a release build (target/release/heshare and libheshare.so), python3-pytest and
# python3-pexpect for the Python suite and `expect` for the expect suite. Each expect test has a
# deadline of $HESHARE_REGRESSION_TIMEOUT seconds (default 300). Logs of the runs stay in the
# printed directory when a test differs, or with HESHARE_REGRESSION_KEEP=1.
# HESHARE_REGRESSION_ONLY="expect:test39.3 testsuite:tests/test_x.py" runs only those tests (the
# keys a differing test is printed with), to look into one difference without the whole suite.
# Exit 3: the Debian archive lists the installed Slurm but carries no source of it (nothing run).
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  gres|all|"") src=""; what=${1:-gres} ;;
  *) src=$1; what=${2:-gres} ;;
esac
case $what in gres|all) ;; *) echo "unknown suite: $what (gres or all)" >&2; exit 2 ;; esac
if [ -z "$src" ]; then
  cache=${HESHARE_SLURM_SOURCE_CACHE:-/var/cache/heshare-slurm-source}
  rc=0
  src=$(bash scripts/slurm-source.sh "$cache") || rc=$?
  case $rc in
    0) ;;
    # The archive lists the installed Slurm but carries no source of it: its own tests cannot
    # be run, which is said, not failed (exit 3; .ci/run reports it and goes on).
    3) echo "slurm-regression: NOT RUN: no source of the installed Slurm on this Debian archive" >&2; exit 3 ;;
    *) echo "cannot fetch Slurm's source" >&2; exit 2 ;;
  esac
fi
src=$(cd "$src" && pwd) || exit 2
[ -d "$src/testsuite/python/tests" ] || { echo "$src/testsuite/python/tests: not a Slurm source tree" >&2; exit 2; }
for f in target/release/heshare target/release/libheshare.so; do
  [ -e "$f" ] || { echo "$f: missing (cargo build --release)" >&2; exit 2; }
done
per_test=${HESHARE_REGRESSION_TIMEOUT:-300}
py=/usr/bin/python3
# Without its tools every test fails both ways, which would read as "the same outcome".
"$py" -c 'import pytest, pexpect' 2>/dev/null \
  || { echo "$py cannot import pytest and pexpect (Debian: python3-pytest python3-pexpect)" >&2; exit 2; }
command -v expect >/dev/null || { echo "expect is missing (Debian: expect)" >&2; exit 2; }
work=$(mktemp -d /tmp/heshare-regression.XXXXXX)
keep=${HESHARE_REGRESSION_KEEP:-0}  # 1 when a test differs (or asked): the logs stay for reading
trap 'for c in "$work"/*/etc; do [ -d "$c" ] && bash scripts/local-slurm.sh stop "$(dirname "$c")" >/dev/null 2>&1; done; [ "$keep" = 1 ] || rm -rf "$work"' EXIT

start() {  # NAME PORT [ENV...]
  local name=$1 port=$2; shift 2
  env HESHARE_SLURM_PORT="$port" "$@" bash scripts/local-slurm.sh start "$work/$name" >"$work/$name.start" 2>&1 \
    || { cat "$work/$name.start"; echo "cannot start the $name cluster" >&2; exit 2; }
  printf 'SlurmSourceDir=%s\nSlurmBuildDir=%s\nSlurmInstallDir=/usr\nSlurmConfigDir=%s\n' \
    "$src" "$src" "$work/$name/etc" > "$work/$name.testsuite.conf"
}

stop() {  # NAME
  bash scripts/local-slurm.sh stop "$work/$1" >/dev/null 2>&1
}

with_heshare=(HESHARE_PLUGIN="$PWD/target/release/libheshare.so" HESHARE_NODE_HELPER="$PWD/target/release/heshare")
side_env() {  # SIDE: the environment its clusters start with
  [ "$1" = heshare ] && printf '%s\n' "${with_heshare[@]}"
}

# Outcomes are lines "OUTCOME TEST", TEST prefixed by where it ran (hetero:, testsuite:,
# expect:) so that both sides' lines compare; failed expect subtests are lines of their own.
run_pytest() {  # CLUSTER TAG OUT PATHS...
  local name=$1 tag=$2 out=$3; shift 3
  ( cd "$src/testsuite/python" && SLURM_CONF=$work/$name/etc/slurm.conf \
      SLURM_TESTSUITE_CONF=$work/$name.testsuite.conf \
      timeout 3600 "$py" -m pytest "$@" -p no:cacheprovider --basetemp="$work/$name.pytest-tmp" -q -rA ) \
    > "$work/$name.pytest.log" 2>&1
  grep -E '^(PASSED|FAILED|ERROR|SKIPPED) ' "$work/$name.pytest.log" \
    | sed -E 's/ - .*//; s/^SKIPPED \[[0-9]+\] /SKIPPED /' \
    | awk -v t="$tag" '{print $1, t ":" $2}' >> "$out"
}

# The Python tests that submit GPU or MPS work: tests/commands/sbatch's and tests/features/gres's
# up to 23.02, test_105_*, test_121_* and their kin from 23.11 (one flat directory).
gres_pytests() {
  ( cd "$src/testsuite/python" && grep -rl --include='*.py' -E -e '--gres|--gpus|gres/gpu|mps' tests | sort )
}

expect_tests() {
  ( cd "$src/testsuite/expect" || exit
    if [ "$what" = all ]; then
      grep -l -E -- '--gres|mps|--array|scontrol hold|--hold|--nice|nice=' test* 2>/dev/null \
        | grep -E '^test[0-9]+\.[0-9]+$'
    else
      ls | grep -E '^test(39|40)\.[0-9]+$'
    fi | sort -V )
}

# The expect tests write their scratch files beside themselves: each cluster runs its own copy.
run_expect() {  # CLUSTER OUT TESTS...
  local name=$1 outf=$2 t rc out dir="$work/$1.expect"; shift 2
  [ -d "$dir" ] || cp -r "$src/testsuite/expect" "$dir"
  for t in "$@"; do
    out=$(cd "$dir" && SLURM_CONF=$work/$name/etc/slurm.conf \
            SLURM_TESTSUITE_CONF=$work/$name.testsuite.conf timeout "$per_test" expect "./$t" 2>&1)
    rc=$?
    if grep -q "^SUCCESS *: $t" <<<"$out"; then echo "PASSED expect:$t"
    elif grep -qE "^SKIPPED *: $t" <<<"$out"; then echo "SKIPPED expect:$t"
    elif [ "$rc" = 124 ]; then echo "TIMEOUT expect:$t"
    else echo "FAILED expect:$t"
    fi
    # Subtests that failed, by number: a test failing both ways may fail differently.
    grep -oE 'Subtest +[0-9]+ failed' <<<"$out" | awk -v t="$t" '{print "FAILED expect:" t ":subtest" $2}' | sort -u
    printf '%s\n' "$out" > "$work/$name.$t.log"
    # A test that left jobs behind must not hold up the next.
    SLURM_CONF=$work/$name/etc/slurm.conf scancel --full --quiet --user=root 2>/dev/null
    settle "$name"
  done >> "$outf"
}

# Until the cluster has no job and no node completing, allocated or planned, 60 s at most: each
# expect test starts by asking for an idle node, and backfill leaves nodes PLANNED for a pending
# job until its next cycle (30 s), after the job is gone (on two nodes both were, and every test
# after it skipped).
settle() {  # CLUSTER
  local conf=$work/$1/etc/slurm.conf i
  for i in $(seq 60); do
    if [ -z "$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null)" ] &&
      ! SLURM_CONF=$conf sinfo -h -N -o %t 2>/dev/null | grep -qE 'comp|plnd|mix|alloc'; then
      return 0
    fi
    sleep 1
  done
}

# One side, its clusters one after the other: the tests of the suite, or (with a file of keys,
# see `key` below) only those. Outcomes go to OUT.
run_side() {  # SIDE PORT OUT [KEYS]
  local side=$1 port=$2 out=$3 keys=${4:-} env_lines pyt exp tst
  mapfile -t env_lines < <(side_env "$side")
  : > "$out"
  if [ -n "$keys" ]; then
    pyt=$(sed -n 's/^\(hetero\|pytest\)://p' "$keys")
    exp=$(sed -n 's/^expect://p' "$keys")
    tst=$(sed -n 's/^testsuite://p' "$keys")
  else
    if [ "$what" = all ]; then pyt=tests; else pyt=$(gres_pytests); fi
    exp=$(expect_tests)
    tst=$([ "$what" = gres ] && gres_pytests)
  fi
  local tag=hetero
  [ "$what" = all ] && tag=pytest
  # gres: the expect tests on the alike nodes (see the top); all: everything on one cluster.
  local exp_here=$exp exp_ts=""
  [ "$what" = gres ] && { exp_here=""; exp_ts=$exp; }
  if [ -n "$pyt$exp_here" ]; then
    start "$side" "$port" "${env_lines[@]}"
    # shellcheck disable=SC2086 # lists of test paths and names
    [ -n "$pyt" ] && run_pytest "$side" "$tag" "$out" $pyt
    # shellcheck disable=SC2086
    [ -n "$exp_here" ] && run_expect "$side" "$out" $exp_here
    stop "$side"
  fi
  if [ -n "$tst$exp_ts" ]; then
    # The shape Slurm's Python GRES tests ask for.
    start "$side-ts" "$((port + 20))" HESHARE_SLURM_SHAPE=testsuite "${env_lines[@]}"
    # shellcheck disable=SC2086
    [ -n "$tst" ] && run_pytest "$side-ts" testsuite "$out" $tst
    # shellcheck disable=SC2086
    [ -n "$exp_ts" ] && run_expect "$side-ts" "$out" $exp_ts
    stop "$side-ts"
  fi
}

# A test's key, what is run again: expect:TEST for an expect test and its subtests, TAG:FILE.py
# for a Python test (its file).
key() { awk '{t = $2; if (t ~ /^expect:/) { split(t, a, ":"); print a[1] ":" a[2] } else { sub(/\.py.*/, ".py", t); print t } }'; }

# Prints each test whose outcomes (its line and its failed subtests) differ between two files.
compare() {  # PLAIN HESHARE
  local a=$1 b=$2 test mine theirs
  while read -r test; do
    mine=$(awk -v t="$test" '$2 == t {print $1}' "$a" | sort -u | paste -sd, -)
    theirs=$(awk -v t="$test" '$2 == t {print $1}' "$b" | sort -u | paste -sd, -)
    [ "$mine" = "$theirs" ] || echo "$test: without heshare ${mine:-MISSING}, with heshare ${theirs:-MISSING}"
  done < <(cat "$a" "$b" | awk '{print $2}' | sort -u)
}

only=""
if [ -n "${HESHARE_REGRESSION_ONLY:-}" ]; then
  only=$work/only.keys
  tr ' ' '\n' <<<"$HESHARE_REGRESSION_ONLY" | grep -v '^$' > "$only"
fi

t0=$SECONDS
# Both sides at once, on clusters of their own (their tests mostly wait on Slurm).
run_side plain 18817 "$work/plain.outcomes" "$only" > "$work/plain.run" 2>&1 &
plain_pid=$!
run_side heshare 18857 "$work/heshare.outcomes" "$only" > "$work/heshare.run" 2>&1 &
heshare_pid=$!
wait "$plain_pid"; plain_rc=$?
wait "$heshare_pid"; heshare_rc=$?
for side in plain heshare; do
  [ -s "$work/$side.run" ] && sed "s/^/$side: /" "$work/$side.run"
done
if [ "$plain_rc" != 0 ] || [ "$heshare_rc" != 0 ]; then
  keep=1
  echo "slurm-regression: a cluster did not run (logs kept in $work)" >&2
  exit 2
fi

compare "$work/plain.outcomes" "$work/heshare.outcomes" > "$work/first.differs"
if [ -s "$work/first.differs" ]; then
  awk -F': without' '{print "x " $1}' "$work/first.differs" | key | sort -u > "$work/again.keys"
  echo "slurm-regression: $(wc -l < "$work/again.keys") tests differed with both sides running at once; each runs again alone on each side:"
  sed 's/^/  /' "$work/first.differs"
  for side in plain heshare; do
    run_side "$side" "$([ "$side" = plain ] && echo 18817 || echo 18857)" "$work/$side.again" "$work/again.keys" || exit 2
    # The reruns' outcomes replace the first ones.
    awk 'NR == FNR {drop[$0] = 1; next} {t = $2; if (t ~ /^expect:/) { split(t, a, ":"); k = a[1] ":" a[2] } else { k = t; sub(/\.py.*/, ".py", k) } if (!(k in drop)) print}' \
      "$work/again.keys" "$work/$side.outcomes" > "$work/$side.final"
    cat "$work/$side.again" >> "$work/$side.final"
  done
else
  for side in plain heshare; do cp "$work/$side.outcomes" "$work/$side.final"; done
fi

summary() { grep -v ':subtest' "$1" | awk '{print $1}' | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}'; echo; }
echo "$(slurmctld -V), suite $what: $(grep -vc ':subtest' "$work/plain.final") tests, $((SECONDS - t0)) s"
echo "without heshare: $(summary "$work/plain.final")"
echo "with heshare:    $(summary "$work/heshare.final")"
compare "$work/plain.final" "$work/heshare.final" > "$work/final.differs"
if [ ! -s "$work/final.differs" ]; then
  echo "slurm-regression: every test gives the same outcome with and without heshare"
  [ "$keep" = 1 ] && echo "slurm-regression: logs kept in $work"
  exit 0
fi
keep=1
sed 's/^/differs: /' "$work/final.differs"
echo "slurm-regression: outcomes differ with heshare (logs kept in $work)"
exit 1
