#!/usr/bin/env bash
# The data-path benchmark (issue 11), on a GPU host from a bundle
# (scripts/bundle.sh): one 3x3 64->64 float16 NHWC layer
# (tests/bench/conv64_nhwc.textproto) served by a default-flag server, timed
# by convserve-load over KServe for each transport and size, beside the
# pinned-copy floor measured on the same host (PyTorch, pinned host <-> GPU)
# and the figures before this work. Prints a table last; logs go to $OUT.
#   BUNDLE=bundle OUT=/tmp/out scripts/bench_data_path.sh
set -uo pipefail
bundle="${BUNDLE:-bundle}"
out="${OUT:-bench_logs}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$bundle/bin"
graph=tests/bench/conv64_nhwc.textproto
port=18101
window="${WINDOW:-2s}"

nvidia-smi -L | tee "$out/device.txt"
source "$(dirname "${BASH_SOURCE[0]}")/bench_server.sh"
trap '[ -n "$server" ] && kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$socket"' EXIT
# The server's address: loopback TCP, or a Unix socket for the rows that
# say so.
address=127.0.0.1:$port
socket="/tmp/convserve-bench-$$.sock"
server_args=(--metrics_listen=)
server_wait_seconds=60
start_server main

# The floor: one pinned host->device and device->host copy of the tensor.
python3 - > "$out/floor.txt" 2>&1 <<'PY'
import torch
for n in (1, 32):
    nbytes = n * 64 * 56 * 56 * 2
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        dev.copy_(host, non_blocking=True); host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        dev.copy_(host, non_blocking=True)
    stop.record(); torch.cuda.synchronize()
    h2d = start.elapsed_time(stop) / 50
    start.record()
    for _ in range(50):
        host.copy_(dev, non_blocking=True)
    stop.record(); torch.cuda.synchronize()
    d2h = start.elapsed_time(stop) / 50
    print(f"floor {n} {h2d + d2h:.4f} {nbytes / h2d / 1e6:.1f} {nbytes / d2h / 1e6:.1f}")
PY

# The floor of a gRPC unary call on this host: an empty ServerLive round trip.
"$bin/rpc_floor_bench" --server=$address --requests=20000 > "$out/rpc_floor.txt" 2>&1

# run NAME SHAPE CONCURRENCY EXTRA_FLAGS...: one closed-loop level.
run() {
  local name=$1 shape=$2 concurrency=$3
  shift 3
  timeout 300 "$bin/convserve-load" --server=$address --graph_file=$graph \
    --input_shape="$shape" --protocol=kserve --concurrency_range="$concurrency" \
    --warmup=1s --window="$window" --stable_windows=2 --max_windows=4 \
    --csv="$out/$name.csv" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$?"
}

# One in flight: blocking calls (the client thread waits in gRPC itself,
# no hand-off to a callback thread), the fastest of convserve-load's modes
# at concurrency 1; sys_401k_callback shows the callback API beside it.
run msg_401k 1,64,56,56 1 --calls=blocking
run sys_401k 1,64,56,56 1 --shared_memory=system --calls=blocking
run sys_401k_callback 1,64,56,56 1 --shared_memory=system --calls=callback
run cuda_401k 1,64,56,56 1 --shared_memory=cuda --calls=blocking
run msg_12m 32,64,56,56 1 --calls=blocking
run sys_12m 32,64,56,56 1 --shared_memory=system --calls=blocking
run cuda_12m 32,64,56,56 1 --shared_memory=cuda --calls=blocking
run stream_401k 1,64,56,56 1 --streaming
run stream_sys_401k 1,64,56,56 1 --streaming --shared_memory=system
# GPU busy at concurrency 64, batch 1, CUDA shared memory (callback calls
# over convserve-load's default 4 connections at this concurrency).
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64 1,64,56,56 64 --shared_memory=cuda
kill $smi 2>/dev/null
# The same over ModelStreamInfer streams (one per connection, 4 here): no
# unary call per request.
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization_stream.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64_stream 1,64,56,56 64 --shared_memory=cuda --streaming
kill $smi 2>/dev/null
run cuda_401k_c64_1conn 1,64,56,56 64 --shared_memory=cuda --connections=1
run msg_401k_c64 1,64,56,56 64
# The same server with workers that sleep at once (--worker_spin_us=0):
# what polling for the next request saves (docs/runtime.md).
start_server nospin --worker_spin_us=0
run sys_401k_nospin 1,64,56,56 1 --shared_memory=system --calls=blocking
run sys_12m_nospin 32,64,56,56 1 --shared_memory=system --calls=blocking
run cuda_12m_nospin 32,64,56,56 1 --shared_memory=cuda --calls=blocking
# Workers that wait for each request before they launch the next
# (--launch_ahead=false): what launching ahead gives at 64 in flight.
start_server noahead --launch_ahead=false
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization_noahead.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64_noahead 1,64,56,56 64 --shared_memory=cuda
kill $smi 2>/dev/null
# Four workers per GPU at 64 in flight (the GPU-busy target).
start_server w4 --workers_per_gpu=4
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization_w4.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64_w4 1,64,56,56 64 --shared_memory=cuda
kill $smi 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization_stream_w4.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64_stream_w4 1,64,56,56 64 --shared_memory=cuda --streaming
kill $smi 2>/dev/null
# The old layout of gRPC's threads, a completion queue each
# (--grpc_queues=4; the default is one queue they share, docs/runtime.md).
start_server q4 --grpc_queues=4
run sys_401k_q4 1,64,56,56 1 --shared_memory=system --calls=blocking
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
  > "$out/utilization_q4.txt" 2>/dev/null &
smi=$!
run cuda_401k_c64_q4 1,64,56,56 64 --shared_memory=cuda
kill $smi 2>/dev/null
# The same server on a Unix socket instead of loopback TCP (a sidecar's
# choice, docs/runtime.md): the 12.8 MB request through gRPC bytes, and the
# shared-memory rows, whose clients are on this machine by definition.
address="unix:$socket"
start_server unix
"$bin/rpc_floor_bench" --server=$address --requests=20000 > "$out/rpc_floor_unix.txt" 2>&1
run msg_12m_unix 32,64,56,56 1 --calls=blocking
run sys_401k_unix 1,64,56,56 1 --shared_memory=system --calls=blocking
run cuda_401k_unix 1,64,56,56 1 --shared_memory=cuda --calls=blocking
run sys_12m_unix 32,64,56,56 1 --shared_memory=system --calls=blocking
run cuda_12m_unix 32,64,56,56 1 --shared_memory=cuda --calls=blocking
# GPU busy at 64 in flight over the socket: unary calls, then streams over
# the default 4 connections and over 8.
for row in "c64_unix|" "c64_stream_unix|--streaming" "c64_stream8_unix|--streaming --connections=8"; do
  IFS='|' read -r tag flags <<< "$row"
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
    > "$out/utilization_$tag.txt" 2>/dev/null &
  smi=$!
  # shellcheck disable=SC2086  # $flags is a list of flags
  run cuda_401k_$tag 1,64,56,56 64 --shared_memory=cuda $flags
  kill $smi 2>/dev/null
done
address=127.0.0.1:$port
start_server verify
# Correctness of each transport against the CPU reference.
for mode in none system cuda; do
  timeout 120 "$bin/convserve-load" --server=$address --graph_file=$graph \
    --input_shape=2,64,56,56 --protocol=kserve --shared_memory=$mode --verify --requests=5 \
    > "$out/verify_$mode.log" 2>&1
  echo "verify $mode rc=$? $(grep -E '^verify' "$out/verify_$mode.log")"
done

python3 - "$out" <<'PY'
import csv, os, sys
out = sys.argv[1]
floor = {}
for line in open(os.path.join(out, "floor.txt")):
    parts = line.split()
    if parts and parts[0] == "floor":
        floor[int(parts[1])] = (float(parts[2]), float(parts[3]), float(parts[4]))
def level(name):
    path = os.path.join(out, name + ".csv")
    if not os.path.exists(path):
        return None
    rows = list(csv.DictReader(open(path)))
    return rows[-1] if rows else None
before = {"msg_401k": 0.93, "msg_12m": 22.2, "msg_401k_c64": None}
targets = {"sys_401k": "<= 0.15", "msg_12m": "<= 11", "sys_12m": "<= 1.0", "cuda_12m": "<= 0.3",
           "sys_401k_unix": "<= 0.15", "sys_12m_unix": "<= 1.0", "cuda_12m_unix": "<= 0.3"}
def num(row, key):
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return float("nan")
print(f"{'request':<38}{'p50 ms':>8}{'p99 ms':>8}{'req/s':>8}{'target':>8}{'before':>8}"
      f"{'floor':>7}{'server':>8}{'queue':>7}{'copies':>8}{'GPU':>7}{'outside':>8}")
for name, label, n in [
    ("msg_401k", "1x64x56x56 (401 KB), gRPC bytes", 1),
    ("sys_401k", "1x64x56x56, system shm", 1),
    ("sys_401k_callback", "the same, gRPC callback API", 1),
    ("cuda_401k", "1x64x56x56, CUDA shm", 1),
    ("stream_401k", "1x64x56x56, gRPC stream", 1),
    ("stream_sys_401k", "1x64x56x56, system shm, gRPC stream", 1),
    ("msg_12m", "32x64x56x56 (12.8 MB), gRPC bytes", 32),
    ("msg_12m_unix", "the same, over a Unix socket", 32),
    ("sys_12m", "32x64x56x56, system shm", 32),
    ("cuda_12m", "32x64x56x56, CUDA shm", 32),
    ("sys_401k_nospin", "1x64x56x56, system shm, no polling", 1),
    ("sys_12m_nospin", "32x64x56x56, system shm, no polling", 32),
    ("cuda_12m_nospin", "32x64x56x56, CUDA shm, no polling", 32),
    ("msg_401k_c64", "1x64x56x56, 64 in flight, gRPC bytes", 1),
    ("cuda_401k_c64", "1x64x56x56, 64 in flight, CUDA shm", 1),
    ("cuda_401k_c64_1conn", "the same, one connection", 1),
    ("cuda_401k_c64_noahead", "the same, --launch_ahead=false", 1),
    ("cuda_401k_c64_w4", "the same, 4 connections, 4 workers", 1),
    ("cuda_401k_c64_stream", "64 in flight, CUDA shm, gRPC streams", 1),
    ("cuda_401k_c64_stream_w4", "the same, 4 workers", 1),
    ("sys_401k_q4", "1x64x56x56, system shm, --grpc_queues=4", 1),
    ("cuda_401k_c64_q4", "64 in flight, CUDA shm, --grpc_queues=4", 1),
    ("sys_401k_unix", "Unix socket: 1x64x56x56, system shm", 1),
    ("cuda_401k_unix", "Unix socket: 1x64x56x56, CUDA shm", 1),
    ("sys_12m_unix", "Unix socket: 32x64x56x56, system shm", 32),
    ("cuda_12m_unix", "Unix socket: 32x64x56x56, CUDA shm", 32),
    ("cuda_401k_c64_unix", "Unix socket: 64 in flight, CUDA shm", 1),
    ("cuda_401k_c64_stream_unix", "the same, gRPC streams", 1),
    ("cuda_401k_c64_stream8_unix", "the same, 8 connections", 1)]:
    row = level(name)
    b = before.get(name)
    f = floor.get(n, (float("nan"),))[0]
    if row is None:
        print(f"{label:<38}{'(no result)':>8}")
        continue
    copies = num(row, "server_h2d_ms") + num(row, "server_d2h_ms")
    outside = num(row, "latency_mean_ms") - num(row, "server_request_ms")
    print(f"{label:<38}{num(row, 'latency_p50_ms'):>8.3f}{num(row, 'latency_p99_ms'):>8.3f}"
          f"{num(row, 'throughput_rps'):>8.0f}{targets.get(name, '-'):>8}"
          f"{(f'{b:.2f}' if b else '-'):>8}{f:>7.3f}{num(row, 'server_request_ms'):>8.3f}"
          f"{num(row, 'server_queue_ms'):>7.3f}"
          f"{copies:>8.3f}{num(row, 'server_compute_ms'):>7.3f}{outside:>8.3f}")
print("columns: latency from convserve-load (closed loop, 1 in flight unless said: blocking "
      "calls at 1 in flight, the callback API at 64 over 4 connections); before = the "
      "issue's figures (same host kind, gRPC bytes); floor = pinned H2D + D2H of the tensor "
      "(PyTorch, this host); server/queue/copies/GPU = the server's mean request, queue, "
      "H2D+D2H and compute time (GetStatistics); outside = client mean - server request time")
for name, calls, workers in (("utilization.txt", "unary calls", "2 workers"),
                             ("utilization_noahead.txt", "unary calls",
                              "2 workers, --launch_ahead=false"),
                             ("utilization_w4.txt", "unary calls", "4 workers"),
                             ("utilization_stream.txt", "streams over 4 connections", "2 workers"),
                             ("utilization_stream_w4.txt", "streams over 4 connections", "4 workers"),
                             ("utilization_q4.txt", "unary calls",
                              "2 workers, --grpc_queues=4"),
                             ("utilization_c64_unix.txt", "unary calls, Unix socket", "2 workers"),
                             ("utilization_c64_stream_unix.txt",
                              "streams over 4 connections, Unix socket", "2 workers"),
                             ("utilization_c64_stream8_unix.txt",
                              "streams over 8 connections, Unix socket", "2 workers")):
    path = os.path.join(out, name)
    util = [float(x) for x in open(path) if x.strip()] if os.path.exists(path) else []
    if util:
        print(f"GPU busy at 64 in flight, CUDA shm, {calls}, {workers} (target >= 60%; "
              f"before 11% with gRPC bytes): mean {sum(util)/len(util):.0f}% of {len(util)} samples")
for n, (total, h2d_gbs, d2h_gbs) in sorted(floor.items()):
    print(f"pinned copy floor N={n}: {total:.3f} ms round trip (H2D {h2d_gbs:.1f} GB/s, D2H {d2h_gbs:.1f} GB/s)")
for name, over in (("rpc_floor.txt", "loopback TCP"), ("rpc_floor_unix.txt", "Unix socket")):
    path = os.path.join(out, name)
    for line in open(path) if os.path.exists(path) else []:
        if line.startswith("rpc floor"):
            print(f"gRPC unary floor over {over} (empty ServerLive round trip, 1 in flight): "
                  + line[len("rpc floor "):].strip())
PY
