#!/usr/bin/env bash
# NVIDIA's perf_analyzer beside convserve-load, on a GPU host from a bundle
# (scripts/bundle.sh): one default-flag server, one graph and input shape,
# closed loop at concurrency 1 and 16 over KServe gRPC, once with tensors in
# the messages and once in system shared memory; then at concurrency 64 with
# the tensors in CUDA shared memory (issue 11's GPU-busy row), perf_analyzer
# synchronous and --async beside convserve-load, with the GPU's busy share
# (nvidia-smi) of each run. perf_analyzer comes from the
# wheel `scripts/setup.sh --perf-analyzer` downloads (the GPU host reaches no
# registry; the binary needs glibc >= 2.38, so it does not run on Debian 12).
# Prints perf_analyzer's table, then convserve-load's; logs go to $OUT.
#   BUNDLE=bundle WHEELS=.perf-analyzer OUT=/tmp/pa scripts/perf_analyzer_compare.sh
# GRAPH (a graph file) and SHAPE (logical N,C,H,W) choose another graph; the
# default is the data-path benchmark's 3x3 64->64 float16 NHWC layer.
set -uo pipefail
bundle="${BUNDLE:-bundle}"
wheels="${WHEELS:-.perf-analyzer}"
out="${OUT:-perf_analyzer_logs}"
graph="${GRAPH:-tests/bench/conv64_nhwc.textproto}"
shape="${SHAPE:-1,64,56,56}"
window_ms="${WINDOW_MS:-3000}"
port=18111
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$bundle/bin"

wheel=$(ls "$wheels"/perf_analyzer-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "no perf_analyzer wheel in $wheels: run scripts/setup.sh --perf-analyzer where PyPI is reachable and carry $wheels"; exit 2; }
rm -rf "$out/perf_analyzer"
python3 -m zipfile -e "$wheel" "$out/perf_analyzer" || exit 2
pa="$out/perf_analyzer/perf_analyzer/bin/perf_analyzer"
chmod +x "$pa"
"$pa" --version > "$out/pa_version.txt" 2>&1 || { echo "perf_analyzer does not run here:"; cat "$out/pa_version.txt"; exit 2; }

nvidia-smi -L | tee "$out/device.txt"
"$bin/convserve-server" --listen=127.0.0.1:$port --metrics_listen= > "$out/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
"$bin/convserve-health" --server=127.0.0.1:$port --wait_seconds=60 > /dev/null || {
  echo "server did not start"; cat "$out/server.log"; exit 1; }

# Load the graph (weights from --seed) and learn its name, layout and output.
"$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" --input_shape="$shape" \
  --requests=1 > "$out/load_graph.log" 2>&1 || { cat "$out/load_graph.log"; exit 1; }
model=$(sed -n "s/^loaded graph '\([^']*\)'.*/\1/p" "$out/load_graph.log")
IFS=, read -r -a dims <<< "$shape"
# KServe shapes are in byte order: N, spatial..., C for channels-last graphs.
if grep -q "NHWC\|NDHWC" "$out/load_graph.log"; then
  kserve_shape="${dims[0]},$(IFS=,; echo "${dims[*]:2}"),${dims[1]}"
else
  kserve_shape="$shape"
fi
# convserve-load prints the output's shape; its bytes follow from the dtype.
output_bytes=$(python3 - "$out/load_graph.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^output \[([0-9, ]*)\] (\w+):", text, re.M)
n = 1
for d in m.group(1).split(","):
    n *= int(d)
print(n * (4 if m.group(2) == "FLOAT32" else 2))
PY
)
echo "model $model, KServe input shape [$kserve_shape], output $output_bytes bytes" | tee "$out/model.txt"

# pa NAME CONCURRENCY EXTRA_FLAGS...: perf_analyzer, one level, CSV in $out.
# perf_analyzer keeps a copy of every request's input and output tensors
# and copies them again each window; with tensors in the messages at high
# rates that can grow until the host runs out of memory (its issue #84). A
# watchdog samples its resident memory every 0.2 s, writes the peak to the
# log and kills it past PA_RSS_LIMIT_GIB (32): such a run shows as "no
# result". (An address-space cap instead, ulimit -v 24 GiB, ended every
# concurrency-16 run with tensors in the messages in std::bad_alloc before
# its first window, H100 host, 2026-11-24.) With tensors in the messages its
# windows are counted in requests (MESSAGE_WINDOW_REQUESTS, 1000), not time.
pa() {
  local name=$1 concurrency=$2 limit_kib=$(( ${PA_RSS_LIMIT_GIB:-32} << 20 )) peak=0 rss pid rc
  shift 2
  timeout 300 "$pa" -m "$model" -i grpc -u 127.0.0.1:$port --shape "input:$kserve_shape" \
    --concurrency-range "$concurrency" --measurement-interval "$window_ms" \
    --stability-percentage 20 --max-trials 6 -f "$out/pa_$name.csv" "$@" \
    > "$out/pa_$name.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    # timeout's child is perf_analyzer: sum the resident memory of both.
    rss=$(cat /proc/$pid/status /proc/$(pgrep -P $pid | head -1)/status 2>/dev/null \
      | awk '/^VmRSS:/ {kib += $2} END {print kib + 0}')
    [ "$rss" -gt "$peak" ] && peak=$rss
    if [ "$rss" -gt "$limit_kib" ]; then
      echo "watchdog: resident memory ${rss} KiB over ${PA_RSS_LIMIT_GIB:-32} GiB: killed" >> "$out/pa_$name.log"
      pkill -KILL -P $pid; kill -KILL $pid 2>/dev/null
    fi
    sleep 0.2
  done
  wait $pid
  rc=$?
  echo "perf_analyzer $name rc=$rc peak resident memory $((peak >> 10)) MiB" | tee -a "$out/pa_$name.log"
  if [ $rc -ne 0 ]; then tail -4 "$out/pa_$name.log" | head -3 | sed 's/^/    /'; fi
}
# cl NAME CONCURRENCY EXTRA_FLAGS...: convserve-load, the same level.
cl() {
  local name=$1 concurrency=$2
  shift 2
  timeout 300 "$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" \
    --input_shape="$shape" --protocol=kserve --concurrency_range="$concurrency" \
    --warmup=1s --window="${window_ms}ms" --stable_windows=2 --max_windows=6 \
    --csv="$out/cl_$name.csv" "$@" > "$out/cl_$name.log" 2>&1
  echo "convserve-load $name rc=$?"
}

# busy TOOL NAME CONCURRENCY FLAGS...: TOOL (pa or cl) while nvidia-smi
# samples the GPU's utilization every 100 ms into $out/busy_TOOL_NAME.txt.
busy() {
  local tool=$1 name=$2 smi
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
    > "$out/busy_${tool}_$name.txt" 2>/dev/null &
  smi=$!
  "$@"
  kill $smi 2>/dev/null
  wait $smi 2>/dev/null
}

for c in 1 16; do
  pa "msg_c$c" "$c" --measurement-mode count_windows \
    --measurement-request-count "${MESSAGE_WINDOW_REQUESTS:-1000}"
  pa "sys_c$c" "$c" --shared-memory system --output-shared-memory-size "$output_bytes"
  cl "msg_c$c" "$c"
  cl "sys_c$c" "$c" --shared_memory=system
done
busy pa cuda_c64 64 --shared-memory cuda --output-shared-memory-size "$output_bytes"
busy pa cuda_async_c64 64 --shared-memory cuda --output-shared-memory-size "$output_bytes" --async
busy cl cuda_c64 64 --shared_memory=cuda

python3 - "$out" <<'PY'
import csv, os, sys
out = sys.argv[1]
rows = []
runs = [(tool, prefix, transport, tag, c)
        for tool, prefix in (("perf_analyzer", "pa"), ("convserve-load", "cl"))
        for transport, tag in (("message", "msg"), ("system shm", "sys"))
        for c in (1, 16)]
runs += [("perf_analyzer", "pa", "CUDA shm", "cuda", 64),
         ("perf_analyzer --async", "pa", "CUDA shm", "cuda_async", 64),
         ("convserve-load", "cl", "CUDA shm", "cuda", 64)]
for tool, prefix, transport, tag, c in runs:
    path = os.path.join(out, "%s_%s_c%d.csv" % (prefix, tag, c))
    row = {"tool": tool, "transport": transport, "concurrency": c}
    samples = os.path.join(out, "busy_%s_%s_c%d.txt" % (prefix, tag, c))
    if os.path.exists(samples):
        util = [float(x) for x in open(samples) if x.strip()]
        if util:
            row["busy"] = "%.0f%%" % (sum(util) / len(util))
    try:
        with open(path) as f:
            data = list(csv.DictReader(f))
        last = data[-1]
        if prefix == "pa":  # microseconds
            row["rps"] = float(last["Inferences/Second"])
            for q in ("p50", "p90", "p99"):
                row[q] = float(last["%s latency" % q]) / 1000
        else:
            row["rps"] = float(last["throughput_rps"])
            for q in ("p50", "p90", "p99"):
                row[q] = float(last["latency_%s_ms" % q])
    except Exception as e:  # a failed run shows as a row with its reason
        row["error"] = "%s: %s" % (type(e).__name__, e)
        log = os.path.join(out, "%s_%s_c%d.log" % (prefix, tag, c))
        if os.path.exists(log):
            for line in open(log):
                if line.startswith("watchdog:"):  # perf_analyzer's own memory
                    row["error"] = "perf_analyzer " + line.strip()
                    break
                if " rc=" in line and "peak resident memory" in line:
                    row["error"] = line.strip()
    rows.append(row)
print("%-21s %-11s %11s %10s %8s %8s %8s %9s" % ("tool", "transport", "concurrency", "infer/s",
                                                  "p50 ms", "p90 ms", "p99 ms", "GPU busy"))
for r in rows:
    if "error" in r:
        print("%-21s %-11s %11d   no result (%s)" % (r["tool"], r["transport"],
                                                     r["concurrency"], r["error"]))
    else:
        print("%-21s %-11s %11d %10.1f %8.3f %8.3f %8.3f %9s" % (
            r["tool"], r["transport"], r["concurrency"], r["rps"], r["p50"], r["p90"], r["p99"],
            r.get("busy", "-")))
print("GPU busy: nvidia-smi utilization.gpu, mean of 100 ms samples over the run (64-in-flight "
      "rows only; issue 11's target is >= 60% with CUDA shared memory)")
PY
echo "--- perf_analyzer's own summary (server-side figures come from ModelStatistics)"
for f in "$out"/pa_*.log; do echo "== $(basename "$f")"; sed -n '/Client:/,$p' "$f"; done
echo "--- convserve-load's own tables"
for f in "$out"/cl_*.log; do echo "== $(basename "$f")"; grep -A2 "^ *concurrency " "$f"; done
