#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in build-fuzz and runs each for a bounded
# time on a copy of its seed corpus, then replays every input in tests/fuzz/regressions/<name>/.
# Prints, per target, the executions run and the coverage reached; fails on any crash, leak,
# timeout or out-of-memory (the input is left in build-fuzz/findings/<name>/ to be added to
# tests/fuzz/regressions/<name>/ with the fix).
#
#   fuzz.sh [build|run]   both by default; scripts/test.sh builds in the background beside the
#                         k8s tests and runs after the ASan tests
#   FUZZ_SECONDS  total fuzzing time, split evenly over the targets (default 60)
#   JOBS          build parallelism (default 2)
#   FUZZ_TARGETS  a subset, e.g. "negotiation world_table" (default: every target)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODE="${1:-all}"
case "$MODE" in all|build|run) ;; *) echo "usage: fuzz.sh [build|run]" >&2; exit 2 ;; esac
JOBS="${JOBS:-2}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
CLANG="${CLANG:-clang-16}"
CLANGXX="${CLANGXX:-clang++-16}"
command -v "$CLANGXX" >/dev/null || { echo "fuzz.sh: $CLANGXX not found (scripts/install-deps.sh)" >&2; exit 1; }

build() {
  CMAKE_CACHE_ARGS=()
  if command -v ccache >/dev/null; then
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
    CMAKE_CACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  # -O1 -g1: the usual sanitizer setting (reports name file and line); nothing but the fuzzers and
  # the libraries they link is built (the operator's only for admission_review: its webhook).
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$CLANG" -DCMAKE_CXX_COMPILER="$CLANGXX" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DKOROVOD_BUILD_FUZZERS=ON -DKOROVOD_BUILD_TESTS=OFF -DKOROVOD_BUILD_OPERATOR=ON \
    -DKOROVOD_BUILD_BENCH=OFF -DKOROVOD_BUILD_PYTHON=OFF -DKOROVOD_BUILD_TENSORFLOW=OFF \
    -DKOROVOD_WITH_NCCL=OFF "${CMAKE_CACHE_ARGS[@]}" >/dev/null
  cmake --build build-fuzz -j"$JOBS" --target fuzzers
}
[ "$MODE" = run ] || build
[ "$MODE" != build ] || exit 0

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a TARGETS <<<"$FUZZ_TARGETS"
else
  TARGETS=()
  for f in tests/fuzz/*_fuzzer.cc; do
    n="$(basename "$f" _fuzzer.cc)"
    TARGETS+=("$n")
  done
fi
PER=$(( FUZZ_SECONDS / ${#TARGETS[@]} ))
# A fixed seed: CI explores the same inputs every run (how far depends only on the machine's
# speed), so its outcome is the code's, not the draw's. KOROVOD_FUZZ_SEED=0 draws one, for a
# longer hunt by hand.
SEED="${KOROVOD_FUZZ_SEED:-1}"
[ "$PER" -ge 1 ] || PER=1

# Leaks are findings too, but the gRPC/protobuf runtime keeps process-lifetime allocations.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
WORK="build-fuzz/work"
FINDINGS="build-fuzz/findings"
rm -rf "$WORK"
mkdir -p "$WORK" "$FINDINGS"
failed=()
printf '\n%-20s %10s %8s %8s %8s  %s\n' target execs exec/s cov ft result
for n in "${TARGETS[@]}"; do
  bin="build-fuzz/bin/${n}_fuzzer"
  corpus="$WORK/$n"
  mkdir -p "$corpus" "$FINDINGS/$n"
  # A copy: what the run adds stays out of the tree.
  [ -d "tests/fuzz/corpus/$n" ] && cp -r "tests/fuzz/corpus/$n/." "$corpus/"
  log="$WORK/$n.log"
  rc=0
  "$bin" "$corpus" -seed="$SEED" -max_total_time="$PER" -timeout=5 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$FINDINGS/$n/" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)"
  ft="$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)"
  result=ok
  if [ "$rc" != 0 ]; then
    result="CRASH (rc $rc): $(ls "$FINDINGS/$n" | head -3 | tr '\n' ' ')"
    failed+=("$n")
    tail -60 "$log" >&2
  fi
  # Every past finding must stay fixed.
  if [ -d "tests/fuzz/regressions/$n" ] && [ -n "$(ls -A "tests/fuzz/regressions/$n")" ]; then
    if ! "$bin" -timeout=5 -rss_limit_mb=2048 "tests/fuzz/regressions/$n"/* >"$WORK/$n.regressions.log" 2>&1; then
      result="$result; REGRESSION replay failed"
      failed+=("$n (regressions)")
      tail -40 "$WORK/$n.regressions.log" >&2
    else
      result="$result; $(ls "tests/fuzz/regressions/$n" | wc -l) regressions replayed"
    fi
  fi
  printf '%-20s %10s %8s %8s %8s  %s\n' "$n" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]} (inputs in $FINDINGS/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#TARGETS[@]} targets, ${PER} s each, no findings"
