#!/usr/bin/env bash
# Builds the libFuzzer targets (the ASan+UBSan build of scripts/sanitize.sh,
# build-asan/) and runs each on its corpus, printing executions per target
# (docs/testing.md).
#   scripts/fuzz.sh [target...]          every target (or those named)
#   scripts/fuzz.sh --merge [target...]  minimizes what the runs found into
#                                        tests/fuzz/corpus/<target>/ (-merge=1)
# Settings (environment):
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_RUNS      executions per target instead (libFuzzer -runs)
#   FUZZ_WORK      new inputs and crash files (default <build>/fuzz-work);
#                  the checked-in corpus is only read
#   FUZZ_NO_BUILD  1: use the targets as built
#   CONVSERVE_FUZZ_BUILD_DIR  the build folder (default build-asan/)
# Exits 1 when a target crashed; its input is in FUZZ_WORK/<target>/ as
# crash-* (add it to tests/fuzz/regressions/<target>/ with the fix).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_FUZZ_BUILD_DIR:-$root/build-asan}"
work="${FUZZ_WORK:-$build/fuzz-work}"
merge=0
if [ "${1:-}" = "--merge" ]; then
  merge=1
  shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(graph_def_fuzzer graph_file_fuzzer infer_request_fuzzer model_infer_fuzzer)
fi

export ASAN_OPTIONS="handle_sigbus=0:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  # The configuration of scripts/sanitize.sh asan.
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCONVSERVE_CUDA=OFF \
    -DCONVSERVE_SANITIZE=address -DCONVSERVE_FUZZ=ON >/dev/null
  cmake --build "$build" -j "${CONVSERVE_JOBS:-$(nproc)}" --target "${targets[@]}"
fi

failed=0
total=0
for target in "${targets[@]}"; do
  binary="$build/tests/$target"
  corpus="$root/tests/fuzz/corpus/$target"
  found="$work/$target/corpus"
  mkdir -p "$found" "$corpus"
  if [ "$merge" -eq 1 ]; then
    # The smallest set of inputs that keeps the coverage of both.
    merged="$work/$target/merged"
    rm -rf "$merged" && mkdir -p "$merged"
    "$binary" -merge=1 "$merged" "$corpus" "$found" >"$work/$target/merge.log" 2>&1
    rm -rf "$corpus" && mv "$merged" "$corpus"
    echo "$target: corpus $(ls "$corpus" | wc -l) inputs, $(du -sh "$corpus" | cut -f1)"
    continue
  fi
  limit=(-max_total_time="${FUZZ_SECONDS:-60}")
  if [ -n "${FUZZ_RUNS:-}" ]; then limit=(-runs="$FUZZ_RUNS"); fi
  log="$work/$target/fuzz.log"
  status=0
  # New inputs go to the work folder (first); the checked-in corpus is read.
  "$binary" "${limit[@]}" -print_final_stats=1 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$work/$target/" "$found" "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  total=$((total + runs))
  if [ "$status" -ne 0 ]; then
    failed=1
    echo "$target: CRASH after $runs executions (exit $status); see $log and" \
      "$(ls "$work/$target"/crash-* "$work/$target"/oom-* "$work/$target"/timeout-* \
          "$work/$target"/leak-* 2>/dev/null | head -3 | tr '\n' ' ')"
    tail -40 "$log" >&2
  else
    echo "$target: $runs executions, $(ls "$found" | wc -l) new inputs"
  fi
done
[ "$merge" -eq 1 ] || echo "fuzz: $total executions in all"
exit "$failed"
