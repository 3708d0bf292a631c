#!/usr/bin/env bash
# Runs the GPU checks from a bundle (scripts/bundle.sh) on a GPU host, from the
# repository root: the gpu-labelled tests, a server on the GPU, and the
# benchmark beside PyTorch (scripts/bench_gpu_time.sh). Logs go to $OUT
# (default ./gpu_logs); a short summary is printed last.
#   LD_LIBRARY_PATH is set from the bundle; nothing is installed.
set -uo pipefail
bundle="${BUNDLE:-bundle}"
out="${OUT:-gpu_logs}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CONVSERVE_SOURCE_DIR="$PWD"
bin="$bundle/bin"
steps="${STEPS:-tests graphs batching warmup fault oracle runtime server bench}"

nvidia-smi -L | tee "$out/device.txt"
summary=()

# gtest NAME TIMEOUT LINES [VAR=VALUE...]: runs the test binary $bin/NAME
# (with the variables set) into $out/NAME.log, prints its lines matching
# LINES (a regex; empty for none) and any failure, and adds its result to
# the summary.
gtest() {
  local name=$1 limit=$2 lines=$3
  shift 3
  env "$@" timeout "$limit" "$bin/$name" > "$out/$name.log" 2>&1
  local rc=$?
  grep -E "${lines:+$lines|}FAILED|Failure" "$out/$name.log" | head -30
  summary+=("$name rc=$rc $(grep -E '^\[  PASSED  \]|FAILED TEST' "$out/$name.log" | tr '\n' ' ')")
}

if [[ " $steps " == *" tests "* ]]; then
  # 292 s on one H100 host, over 400 s on another (its 3D autotune cases).
  timeout 600 "$bin/cudnn_backend_test" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} \
    > "$out/cudnn_backend_test.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED  \]|Failure|error" "$out/cudnn_backend_test.log" | head -20
  sed -n '/^policy /,/^$/p' "$out/cudnn_backend_test.log"
  summary+=("cudnn_backend_test rc=$rc $(grep -E '^\[  PASSED  \]|FAILED TEST' "$out/cudnn_backend_test.log" | tr '\n' ' ')")
  gtest gpu_server_test 120 "relative L2"
  gtest direct_conv_gpu_test 300 "^direct depthwise|winner"
  gtest direct_gemm_gpu_test 300 "^direct gemm, |^race"
  gtest direct_narrow_gpu_test 300 "^direct narrow|^race"
  gtest direct_pointwise_gpu_test 300 "^direct pointwise|^race"
  gtest direct_halo_gpu_test 300 "^direct halo|^race"
  gtest pointwise_pair_gpu_test 300 "^pointwise pair|^pool "
  gtest dependent_launch_gpu_test 200 "^dependent launch|^chain "
  gtest programmatic_entry_gpu_test 300 "^programmatic entry|^copy kind|^slow"
  gtest knob_search_gpu_test 300 "^knob search|  float|  bfloat|winner|alone by name"
fi

if [[ " $steps " == *" graphs "* ]]; then
  # Whole-graph CUDA graphs: random graphs with --cuda_graphs on and off,
  # replays, in-place pointers, unload/reload, cancellation, fallback.
  gtest cuda_graph_test 420 "^cuda_graphs=|^in-place|^capture failure"
  grep -E "CUDA graph (capture|launch) failed" "$out/cuda_graph_test.log" | cut -c1-260 | head -10
fi

if [[ " $steps " == *" batching "* ]]; then
  # Dynamic batching on the GPU: random graphs in batches against the CPU
  # backend, error isolation, the batcher under 64 calls; then the
  # benchmark, batching off vs on (docs/runtime.md, "Dynamic batching").
  gtest dynamic_batching_gpu_test 420 ""
  BUNDLE="$bundle" OUT="$out/batching" bash scripts/bench_batching.sh | tee "$out/bench_batching.txt"
  summary+=("bench_batching: $(grep -E ' vs off: ' "$out/bench_batching.txt" | tr '\n' ' ')")
fi

if [[ " $steps " == *" warmup "* ]]; then
  # Warm-up at load: after LoadGraph every worker of every GPU has the
  # plans, so the first requests build none; a restart on the plan store
  # warms up without searching. Then the cold-start benchmark, whose last
  # row is the restart with warm-up at load (docs/runtime.md).
  gtest warmup_gpu_test 420 "^warm-up:|^run [0-9]"
  BUNDLE="$bundle" OUT="$out/cold_start" bash scripts/bench_cold_start.sh | tee "$out/bench_cold_start.txt"
  summary+=("bench_cold_start: $(grep -E 'vs cold: ' "$out/bench_cold_start.txt" | tr '\n' ' ')")
fi

if [[ " $steps " == *" fault "* ]]; then
  gtest gpu_fault_test 300 "^fault:|^quarantine:" CONVSERVE_SERVER_BINARY="$bin/convserve-server"
fi

if [[ " $steps " == *" oracle "* ]]; then
  # CONVSERVE_ORACLE_* variables (graphs, seed, policies, servers) pass through.
  timeout "${ORACLE_TIMEOUT:-540}" "$bin/gpu_random_graph_oracle_test" > "$out/oracle.log" 2>&1
  rc=$?
  sed -n '/^random-graph oracle/,/^graphs /p' "$out/oracle.log" | head -3
  grep -E "^(autotune|heuristic|heuristic_b|fallback|deterministic|strict_float32) " \
    "$out/oracle.log"
  grep -A3 "^failures under" "$out/oracle.log" | head -20
  grep -E "quarantined on GPU" "$out/oracle.log" | cut -c1-260 | sort | uniq -c | head -10
  summary+=("gpu_random_graph_oracle_test rc=$rc $(grep -E '^\[  PASSED  \]|FAILED TEST' "$out/oracle.log")")
fi

if [[ " $steps " == *" runtime "* ]]; then
  gtest device_pool_test 180 "^GPU |distinct keys|free memory"
  gtest sigterm_during_traffic_test 120 "^backend" CONVSERVE_TEST_BACKEND=cuda \
    CONVSERVE_SERVER_BINARY="$bin/convserve-server"
  timeout 60 "$bin/plan_cache_bench" > "$out/plan_cache_bench.log" 2>&1
  grep BM_ "$out/plan_cache_bench.log"
  timeout 240 "$bin/runtime_bench" > "$out/runtime_bench.log" 2>&1
  grep -v "^\[" "$out/runtime_bench.log"
fi

if [[ " $steps " == *" server "* ]]; then
  "$bin/convserve-server" --listen=127.0.0.1:18001 > "$out/server.log" 2>&1 &
  pid=$!
  sleep 2
  "$bin/convserve-load" --server=127.0.0.1:18001 \
    --graph_file=deploy/examples/resnet_block.textproto --input_shape=8,3,224,224 --requests=50 \
    > "$out/load.log" 2>&1
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8002/metrics').read().decode())" \
    > "$out/metrics.txt" 2>&1
  grep -E "^convserve_(requests_total|plan_builds_total|gpu_memory|build_info|plan_cache|cuda_graph|cached_cuda_graphs)" "$out/metrics.txt"
  if [ -x "$bin/promtool" ]; then
    "$bin/promtool" check metrics < "$out/metrics.txt" && echo "promtool check metrics: OK"
  fi
  kill -TERM $pid; wait $pid
  cat "$out/server.log" "$out/load.log"
fi

if [[ " $steps " == *" bench "* ]]; then
  # The fair benchmark against PyTorch (layers and stacks), its logs in
  # $out/bench.
  OUT="$out/bench" BUNDLE="$bundle" bash scripts/bench_gpu_time.sh
  summary+=("bench: see above and $out/bench")
fi

echo "=== summary"
printf '%s\n' "${summary[@]}"
