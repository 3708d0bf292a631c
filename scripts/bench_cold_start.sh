#!/usr/bin/env bash
# The cold-start benchmark (issue 13): the first request of a shape on a
# fresh server (engine search), a later first request of a new client on
# the same server (plans cached), the first request after a restart on the
# same --plan_cache_dir (engine choices from the plan store), and the first
# request after a restart whose LoadGraph warmed the shape up (plans built on
# every GPU before LoadGraph returned; its time is printed beside). Each
# figure is the request latency convserve-load prints for a single request;
# its LoadGraph is not in it (the first three load with
# --warmup_shapes=none). Run on a GPU host from a bundle (scripts/bundle.sh):
#   BUNDLE=bundle OUT=/tmp/cold scripts/bench_cold_start.sh
# Variables: GRAPH (tests/bench/conv64_nhwc.textproto), SHAPE (4,64,56,56),
# SERVER_FLAGS (extra server flags). Without a GPU it runs on the CPU backend,
# which keeps no engine choices: the figures then only show the mechanics.
set -uo pipefail
bundle="${BUNDLE:-bundle}"
bin="${BIN:-$bundle/bin}"
out="${OUT:-cold_start_logs}"
graph="${GRAPH:-tests/bench/conv64_nhwc.textproto}"
shape="${SHAPE:-4,64,56,56}"
port="${PORT:-18301}"
metrics_port=$((port + 1))
mkdir -p "$out"
[ -d "$bundle/lib" ] && export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
store="$(mktemp -d "${TMPDIR:-/tmp}/convserve_cold_start.XXXXXX")"
address=127.0.0.1:$port
# shellcheck disable=SC2206
server_args=(--metrics_listen=127.0.0.1:$metrics_port --plan_cache_dir="$store" ${SERVER_FLAGS:-})
server_wait_seconds=60
source "$(dirname "${BASH_SOURCE[0]}")/bench_server.sh"
trap '[ -n "$server" ] && kill -TERM $server 2>/dev/null; rm -rf "$store"' EXIT

# first_request NAME WARMUP: one request of a new client whose LoadGraph
# asks for --warmup_shapes=WARMUP; prints its latency in ms.
first_request() {
  timeout 900 "$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" \
    --protocol=kserve --input_shape="$shape" --requests=1 --warmup_shapes="$2" \
    > "$out/load_$1.log" 2>&1
  sed -n 's/.*latency ms min=\([0-9.]*\).*/\1/p' "$out/load_$1.log" | tail -1
}
# warmup_seconds NAME: how long the LoadGraph of run NAME spent warming up.
warmup_seconds() {
  sed -n 's/.*warmed up [0-9]* shape(s) in \([0-9.]*\) s.*/\1/p' "$out/load_$1.log" | tail -1
}
metric() {  # NAME: the value of a metric on the running server, or "-"
  python3 - "$metrics_port" "$1" <<'PY'
import sys, urllib.request
try:
    page = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
except OSError:
    print("-"); sys.exit()
values = [line.split()[-1] for line in page.splitlines() if line.startswith(sys.argv[2] + " ")]
print(values[0] if values else "-")
PY
}

start_server cold
cold=$(first_request cold none)
warm=$(first_request warm none)
cold_searches=$(metric convserve_engine_searches_total)
stop_server
start_server restart
restart=$(first_request restart none)
restart_searches=$(metric convserve_engine_searches_total)
restart_stored=$(metric convserve_engine_choices_from_store_total)
stop_server
start_server warmed
warmed=$(first_request warmed input)
warmed_load=$(warmup_seconds warmed)
warmed_searches=$(metric convserve_engine_searches_total)
warmed_stored=$(metric convserve_engine_choices_from_store_total)
stop_server

(nvidia-smi -L 2>/dev/null || echo "no GPU: CPU backend") | head -1
python3 - "$cold" "$warm" "$restart" "$cold_searches" "$restart_searches" "$restart_stored" \
  "$graph" "$shape" "$warmed" "$warmed_searches" "$warmed_stored" "$warmed_load" <<'PY'
import sys
def number(x):
    return float(x) if x else float("nan")
cold, warm, restart = (number(x) for x in sys.argv[1:4])
warmed, warmed_load = number(sys.argv[9]), number(sys.argv[12])
print(f"graph {sys.argv[7]}, input {sys.argv[8]}; first request of a new client, ms")
print(f"{'server':<48}{'ms':>10}{'searches':>10}{'from store':>12}{'LoadGraph warm-up s':>21}")
print(f"{'fresh server, empty plan store (cold)':<48}{cold:>10.3f}{sys.argv[4]:>10}{'':>12}")
print(f"{'same server again (warm)':<48}{warm:>10.3f}{'':>10}{'':>12}")
print(f"{'restarted on the same --plan_cache_dir':<48}{restart:>10.3f}{sys.argv[5]:>10}{sys.argv[6]:>12}")
print(f"{'restart with warm-up at load':<48}{warmed:>10.3f}{sys.argv[10]:>10}{sys.argv[11]:>12}"
      f"{warmed_load:>21.3f}")
print(f"restart vs cold: {cold / restart:.1f}x faster (target >= 20x); "
      f"restart vs warm: {restart / warm:.1f}x (target <= 2x)")
print(f"warm-up restart vs cold: {cold / warmed:.1f}x faster (target >= 20x); "
      f"warm-up restart vs warm: {warmed / warm:.1f}x (target <= 2x)")
PY
