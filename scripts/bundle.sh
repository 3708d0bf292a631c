#!/usr/bin/env bash
# Makes a relocatable bundle of built binaries: bundle/bin/* plus every shared
# library they need that a GPU host may lack, in bundle/lib. Left out: glibc,
# libstdc++, libgcc, the CUDA driver and cuDNN, which the host provides.
#   scripts/bundle.sh [BUILD_DIR] [OUT_DIR] [BINARY...]
# BINARY... (paths under BUILD_DIR) bundles only those, e.g. the benchmark's
# two for scripts/bench_gpu_time.sh, a smaller copy to carry:
#   scripts/bundle.sh build bundle tests/conv_layer_bench tests/stack_bench
# Run with:  LD_LIBRARY_PATH=bundle/lib bundle/bin/convserve-server ...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$root/bundle}"
binaries=(convserve-server convserve-prober convserve-load convserve-health
          tests/cudnn_backend_test tests/gpu_server_test tests/device_pool_test tests/cuda_graph_test
          tests/dynamic_batching_gpu_test tests/warmup_gpu_test tests/slice_copies_test
          tests/direct_conv_gpu_test tests/direct_gemm_gpu_test tests/direct_narrow_gpu_test
          tests/direct_pointwise_gpu_test
          tests/direct_halo_gpu_test
          tests/pointwise_pair_gpu_test tests/dependent_launch_gpu_test
          tests/programmatic_entry_gpu_test
          tests/knob_search_gpu_test
          tests/gpu_fault_test
          tests/gpu_random_graph_oracle_test
          tests/sigterm_during_traffic_test tests/unload_during_traffic_test
          tests/conv_layer_bench tests/runtime_bench tests/plan_cache_bench tests/stack_bench
          tests/rpc_floor_bench tests/grpc_threading_bench)
if [ $# -gt 2 ]; then binaries=("${@:3}"); fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for binary in "${binaries[@]}"; do
  [ -f "$build/$binary" ] || { echo "bundle: skipping missing $binary"; continue; }
  cp "$build/$binary" "$out/bin/"
  strip --strip-debug "$out/bin/$(basename "$binary")"
done
system='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libstdc\+\+|libgcc_s|libcudnn|libcuda\.|libnvidia)'
for binary in "$out"/bin/*; do
  ldd "$binary" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $system ]] && [ ! -f "$out/lib/$name" ]; then
      cp -L "$path" "$out/lib/$name"
    fi
  done
done
strip --strip-debug "$out"/lib/* 2>/dev/null || true
echo "bundle: $(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
