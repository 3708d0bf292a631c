#!/usr/bin/env bash
# The cold-start benchmark (issue 13): the first request of a shape on a
# fresh server (engine search), a later first request of a new client on
# the same server (plans cached), and the first request after a restart on
# the same --plan_cache_dir (engine choices from the plan store). Each figure
# is the request latency convserve-load prints for a single request; its
# LoadGraph is not in it. Run on a GPU host from a bundle (scripts/bundle.sh):
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
server=
trap '[ -n "$server" ] && kill -TERM $server 2>/dev/null; rm -rf "$store"' EXIT

start_server() {  # NAME
  # shellcheck disable=SC2086
  "$bin/convserve-server" --listen=127.0.0.1:$port --metrics_listen=127.0.0.1:$metrics_port \
    --plan_cache_dir="$store" ${SERVER_FLAGS:-} > "$out/server_$1.log" 2>&1 &
  server=$!
  "$bin/convserve-health" --server=127.0.0.1:$port --wait_seconds=60 > /dev/null || {
    echo "server $1 did not start"; tail -5 "$out/server_$1.log"; exit 1; }
}
stop_server() {
  kill -TERM $server; wait $server; server=
}
# first_request NAME: one request of a new client; prints its latency in ms.
first_request() {
  timeout 300 "$bin/convserve-load" --server=127.0.0.1:$port --graph_file="$graph" \
    --protocol=kserve --input_shape="$shape" --requests=1 > "$out/load_$1.log" 2>&1
  sed -n 's/.*latency ms min=\([0-9.]*\).*/\1/p' "$out/load_$1.log" | tail -1
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
cold=$(first_request cold)
warm=$(first_request warm)
cold_searches=$(metric convserve_engine_searches_total)
stop_server
start_server restart
restart=$(first_request restart)
restart_searches=$(metric convserve_engine_searches_total)
restart_stored=$(metric convserve_engine_choices_from_store_total)
stop_server

(nvidia-smi -L 2>/dev/null || echo "no GPU: CPU backend") | head -1
python3 - "$cold" "$warm" "$restart" "$cold_searches" "$restart_searches" "$restart_stored" \
  "$graph" "$shape" <<'PY'
import sys
cold, warm, restart = (float(x) if x else float("nan") for x in sys.argv[1:4])
print(f"graph {sys.argv[7]}, input {sys.argv[8]}; first request of a new client, ms")
print(f"{'server':<44}{'ms':>10}{'searches':>10}{'from store':>12}")
print(f"{'fresh server, empty plan store (cold)':<44}{cold:>10.3f}{sys.argv[4]:>10}{'':>12}")
print(f"{'same server again (warm)':<44}{warm:>10.3f}{'':>10}{'':>12}")
print(f"{'restarted on the same --plan_cache_dir':<44}{restart:>10.3f}{sys.argv[5]:>10}{sys.argv[6]:>12}")
print(f"restart vs cold: {cold / restart:.1f}x faster (target >= 20x); "
      f"restart vs warm: {restart / warm:.1f}x (target <= 2x)")
PY
