#!/usr/bin/env bash
# The multi-GPU benchmark (issue 13): the same closed-loop load against a
# server on one GPU, then on every GPU, for each transport. Graph: GRAPH
# (tests/bench/conv512_x32_stack.textproto, 32 layers of 3x3 512->512
# float16 NHWC, about 118 GFLOP per 1x512x28x28 request: compute-bound when
# the tensors travel in shared memory). One row per server and transport:
# req/s, p50, p99, the requests each GPU ran (from the server's
# convserve_compute_duration_seconds_count{gpu}) and each GPU's busy time
# (nvidia-smi utilization, mean of 200 ms samples during the measured run);
# last, each configuration against the first (target of issue 13: two GPUs
# >= 1.9x one GPU on compute-bound traffic).
# Run on a GPU host from a bundle (scripts/bundle.sh):
#   BUNDLE=bundle OUT=/tmp/gpus scripts/bench_gpus.sh
# Variables: CONFIGS (';'-separated server flag sets, the first the
# baseline; default "--gpus=0;--gpus=0,1,...,N-1" for the host's N GPUs),
# TRANSPORTS ("system none": convserve-load's --shared_memory), CONCURRENCY
# (16), SHAPE (1,512,28,28), WINDOW (3s), WARMUP (3s), SERVER_FLAGS (for
# every server, besides the default flags), VERIFY (1: check outputs against
# the CPU reference). Without a GPU it runs on the CPU backend (CTest's
# bench_gpus_smoke does, with request-thread counts as the configurations).
set -uo pipefail
bundle="${BUNDLE:-bundle}"
bin="${BIN:-$bundle/bin}"
out="${OUT:-gpus_logs}"
graph="${GRAPH:-tests/bench/conv512_x32_stack.textproto}"
shape="${SHAPE:-1,512,28,28}"
concurrency="${CONCURRENCY:-16}"
transports="${TRANSPORTS:-system none}"
window="${WINDOW:-3s}"
warmup="${WARMUP:-3s}"
server_flags="${SERVER_FLAGS:-}"
port="${PORT:-18341}"
metrics_port=$((port + 1))
mkdir -p "$out"
[ -d "$bundle/lib" ] && export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ -z "${CONFIGS:-}" ]; then
  [ "$gpus" -ge 1 ] || { echo "bench_gpus: no GPU; set CONFIGS"; exit 2; }
  CONFIGS="--gpus=0;--gpus=$(seq -s, 0 $((gpus - 1)))"
fi
IFS=';' read -r -a configs <<< "$CONFIGS"

smi=
address=127.0.0.1:$port
# One plan store for every server: the engine search runs once.
# shellcheck disable=SC2206
server_args=(--metrics_listen=127.0.0.1:$metrics_port --plan_cache_dir="$out/plans" $server_flags)
source "$(dirname "${BASH_SOURCE[0]}")/bench_server.sh"
trap '[ -n "$smi" ] && kill $smi 2>/dev/null; [ -n "$server" ] && kill -TERM $server 2>/dev/null' EXIT

scrape() {  # FILE: the server's metrics page
  python3 -c "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen(
    'http://127.0.0.1:$metrics_port/metrics', timeout=10).read().decode())" > "$1"
}
# load NAME TRANSPORT EXTRA_FLAGS...: convserve-load at CONCURRENCY.
load() {
  local name=$1 transport=$2
  shift 2
  timeout 600 "$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" \
    --input_shape="$shape" --protocol=kserve --shared_memory="$transport" \
    --concurrency_range="$concurrency" "$@" > "$out/load_$name.log" 2>&1 || {
    echo "convserve-load failed for $name"; tail -5 "$out/load_$name.log"; exit 1; }
}

results=()
for transport in $transports; do
  for i in "${!configs[@]}"; do
    name="${transport}_$i"
    # shellcheck disable=SC2086
    start_server "$name" ${configs[$i]}
    # Loads the graph (warm-up at load builds every GPU's plans) and lets
    # every worker capture its CUDA graphs, outside the measured run.
    load "${name}_prime" "$transport" --warmup=0s --window=1s --stable_windows=1 --max_windows=1
    scrape "$out/metrics_${name}_before.txt"
    verify=()
    [ "${VERIFY:-0}" = 1 ] && verify=(--verify)
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader,nounits \
      -lms 200 > "$out/smi_$name.txt" 2>/dev/null &
    smi=$!
    load "$name" "$transport" --warmup="$warmup" --window="$window" --stable_windows=2 \
      --max_windows=4 "${verify[@]}" --csv="$out/load_$name.csv"
    kill $smi 2>/dev/null
    wait $smi 2>/dev/null
    smi=
    scrape "$out/metrics_${name}_after.txt"
    stop_server
    results+=("$name|$transport|${configs[$i]}")
  done
done

(nvidia-smi -L 2>/dev/null || echo "no GPU: CPU backend") | tee "$out/device.txt"
printf '%s\n' "${results[@]}" > "$out/runs.txt"
python3 - "$out" "$graph" "$shape" "$concurrency" "$warmup" <<'PY'
import csv, datetime, re, sys
out, graph, shape, concurrency, warmup = sys.argv[1:6]
warmup_s = float(warmup.rstrip("s"))

def per_gpu(path):
    """Requests each GPU ran: convserve_compute_duration_seconds_count{gpu}."""
    counts = {}
    for line in open(path):
        m = re.match(r'convserve_compute_duration_seconds_count\{(.*)\} (\S+)', line)
        if m:
            gpu = re.search(r'gpu="([^"]*)"', m.group(1)).group(1)
            counts[gpu] = counts.get(gpu, 0) + float(m.group(2))
    return counts

def busy(path):
    """Mean nvidia-smi utilization per GPU during the measured windows: from
    the end of the warm-up (the sampler starts with the load) to the last
    sample."""
    samples = []  # (time, gpu, percent)
    try:
        for row in csv.reader(open(path)):
            try:
                t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                samples.append((t.timestamp(), row[1].strip(), float(row[2])))
            except (IndexError, ValueError):
                continue
    except OSError:
        return {}
    if not samples:
        return {}
    start = samples[0][0] + warmup_s + 0.5
    measured = {}
    for t, gpu, percent in samples:
        if t >= start:
            measured.setdefault(gpu, []).append(percent)
    return {gpu: sum(v) / len(v) for gpu, v in measured.items()}

rows = []
for line in open(f"{out}/runs.txt"):
    name, transport, config = line.rstrip("\n").split("|")
    level = list(csv.DictReader(open(f"{out}/load_{name}.csv")))[-1]
    before = per_gpu(f"{out}/metrics_{name}_before.txt")
    after = per_gpu(f"{out}/metrics_{name}_after.txt")
    ran = {gpu: after[gpu] - before.get(gpu, 0) for gpu in sorted(after)}
    ran = {gpu: n for gpu, n in ran.items() if n > 0}
    utilization = busy(f"{out}/smi_{name}.txt")
    rows.append((name, transport, config, level, ran, utilization))

print(f"graph {graph}, requests {shape}, concurrency {concurrency}, closed loop over KServe")
print(f"{'transport':<10}{'server':<24}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
      f"  requests per GPU (share) / busy %")
for name, transport, config, level, ran, utilization in rows:
    total = sum(ran.values()) or 1
    gpus = ", ".join(
        f"{gpu}: {int(n)} ({100 * n / total:.0f}%)"
        + (f" / {utilization[gpu]:.0f}%" if gpu in utilization else "")
        for gpu, n in ran.items())
    print(f"{transport:<10}{config:<24}{float(level['throughput_rps']):>10.1f}"
          f"{float(level['latency_p50_ms']):>9.3f}{float(level['latency_p99_ms']):>9.3f}"
          f"{level['errors']:>8}  {gpus}")
failed = [row[0] for row in rows if row[3]["errors"] not in ("0", "")]
if failed:
    sys.exit(f"requests failed in: {', '.join(failed)} (see the load logs)")
for transport in dict.fromkeys(row[1] for row in rows):
    runs = [row for row in rows if row[1] == transport]
    base = float(runs[0][3]["throughput_rps"])
    for name, _, config, level, ran, _ in runs[1:]:
        print(f"{transport}: {config} vs {runs[0][2]}: "
              f"{float(level['throughput_rps']) / base:.2f}x req/s "
              f"(target for two GPUs vs one: >= 1.9x)")
PY
