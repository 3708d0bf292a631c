#!/usr/bin/env bash
# The dynamic batching benchmark (issue 13): convserve-load, closed loop at
# CONCURRENCY (64) batch-1 requests of GRAPH (a ResNet-style float16 NHWC
# stack: tests/bench/resnet50_body_stack.textproto, ResNet-50's conv2_x to
# conv5_x, 48 convs) at SHAPE (1,64,56,56) over KServe, against a server
# with batching off, then on (--max_batch_size=MAX_BATCH, 64) for each
# --max_queue_delay_microseconds in DELAYS_US ("0 500"). One row per server:
# req/s, p50, p99, the mean batch size and the batch's compute time the
# server measured, and the p99 bound of issue 13 (max queue delay + 2x the
# batch's compute time); last, batching on vs off against the targets
# (>= 4x req/s, p99 within the bound).
# Run on a GPU host from a bundle (scripts/bundle.sh):
#   BUNDLE=bundle OUT=/tmp/batching scripts/bench_batching.sh
# Variables: SHARED_MEMORY (none, system or cuda: convserve-load's
# --shared_memory), WINDOW (5s), WARMUP (20s: every new batch size builds
# its plans once), SERVER_FLAGS (--engine_selection=heuristic: autotune would
# search each new batch size during the warm-up), BATCH_FLAGS (more flags
# for the batching servers only; --preferred_batch_sizes=8,16,32,64 by
# default, so that few batch sizes, and few plan builds, appear; set it
# empty for none; add --batch_dispatch_when_idle=false for Triton's rule of
# waiting out the delay with the GPU idle), VERIFY (1: check outputs
# against the CPU reference).
# Without a GPU it runs on the CPU backend (CTest runs it so, with a small
# graph and shape, as a smoke test).
set -uo pipefail
bundle="${BUNDLE:-bundle}"
bin="${BIN:-$bundle/bin}"
out="${OUT:-batching_logs}"
graph="${GRAPH:-tests/bench/resnet50_body_stack.textproto}"
shape="${SHAPE:-1,64,56,56}"
concurrency="${CONCURRENCY:-64}"
max_batch="${MAX_BATCH:-64}"
delays="${DELAYS_US:-0 500}"
window="${WINDOW:-5s}"
warmup="${WARMUP:-20s}"
shared_memory="${SHARED_MEMORY:-none}"
server_flags="${SERVER_FLAGS:---engine_selection=heuristic}"
batch_flags="${BATCH_FLAGS---preferred_batch_sizes=8,16,32,64}"
port="${PORT:-18321}"
metrics_port=$((port + 1))
mkdir -p "$out"
[ -d "$bundle/lib" ] && export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
address=127.0.0.1:$port
# shellcheck disable=SC2206
server_args=(--metrics_listen=127.0.0.1:$metrics_port $server_flags)
server_wait_seconds=60
source "$(dirname "${BASH_SOURCE[0]}")/bench_server.sh"
trap '[ -n "$server" ] && kill -TERM $server 2>/dev/null' EXIT

# measure NAME DELAY_US: one closed-loop level; prints one summary line.
measure() {
  local name=$1 delay=$2 verify=()
  [ "${VERIFY:-0}" = 1 ] && verify=(--verify)
  timeout 900 "$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" \
    --input_shape="$shape" --protocol=kserve --shared_memory="$shared_memory" \
    --concurrency_range="$concurrency" --warmup="$warmup" --window="$window" \
    --stable_windows=2 --max_windows=4 "${verify[@]}" \
    --csv="$out/load_$name.csv" > "$out/load_$name.log" 2>&1 || {
    echo "convserve-load failed for $name"; tail -5 "$out/load_$name.log"; exit 1; }
  python3 - "$out/load_$name.csv" "$metrics_port" "$name" "$delay" <<'PY'
import csv, re, sys, urllib.request
row = list(csv.DictReader(open(sys.argv[1])))[-1]
page = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[2]}/metrics", timeout=5).read().decode()
# Kept beside the load log: the batch size and queue delay histograms.
open(sys.argv[1].replace(".csv", ".metrics.txt"), "w").write(page)
def total(metric):
    return sum(float(line.split()[-1]) for line in page.splitlines()
               if re.match(metric + r"(\{| )", line))
executions = total("convserve_batch_size_count")
mean_batch = total("convserve_batch_size_sum") / executions if executions else 1.0
compute = float(row["server_compute_ms"] or 0)
bound = float(sys.argv[4]) / 1000 + 2 * compute
print(sys.argv[3], row["throughput_rps"], row["latency_p50_ms"], row["latency_p99_ms"],
      f"{mean_batch:.2f}", f"{compute:.4f}", f"{bound:.4f}", row["errors"])
PY
}

results=()
start_server off --max_batch_size=0
results+=("$(measure off 0)")
stop_server
for delay in $delays; do
  # shellcheck disable=SC2086
  start_server "on_$delay" --max_batch_size="$max_batch" --max_queue_delay_microseconds="$delay" \
    $batch_flags
  results+=("$(measure "on_$delay" "$delay")")
  stop_server
done

(nvidia-smi -L 2>/dev/null || echo "no GPU: CPU backend") | head -1
printf '%s\n' "${results[@]}" > "$out/summary.txt"
python3 - "$out/summary.txt" "$graph" "$shape" "$concurrency" "$shared_memory" "$max_batch" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
print(f"graph {sys.argv[2]}, batch-1 requests {sys.argv[3]}, concurrency {sys.argv[4]}, "
      f"shared memory {sys.argv[5]}; batching on: --max_batch_size={sys.argv[6]}")
print(f"{'server':<10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'mean batch':>12}"
      f"{'batch compute ms':>18}{'p99 bound ms':>14}{'errors':>8}")
for name, rps, p50, p99, batch, compute, bound, errors in rows:
    print(f"{name:<10}{float(rps):>10.1f}{float(p50):>10.3f}{float(p99):>10.3f}{batch:>12}"
          f"{float(compute):>18.4f}{bound if name != 'off' else '-':>14}"
          f"{errors:>8}")
failed = [row[0] for row in rows if row[7] not in ("0", "")]
if failed:  # no comparison then: the smoke test looks for it
    sys.exit(f"requests failed on: {', '.join(failed)} (see the load logs)")
off = float(rows[0][1])
for name, rps, p50, p99, batch, compute, bound, errors in rows[1:]:
    within = "within" if float(p99) <= float(bound) else "over"
    print(f"{name} vs off: {float(rps) / off:.2f}x req/s (target >= 4x); "
          f"p99 {float(p99):.3f} ms {within} the bound {float(bound):.3f} ms "
          f"(max queue delay + 2x the batch's compute)")
PY
