# Sourced by the benchmark scripts (bench_batching, bench_cold_start,
# bench_data_path, bench_gpus): one convserve-server at a time.
# The caller sets:
#   bin          the folder of convserve-server and convserve-health
#   out          where the logs go
#   address      the address to serve and probe: host:port or unix:PATH
#   server_args  an array of flags every server of the run gets
# and uses:
#   start_server NAME [FLAGS...]  stops the running server if any, starts one
#       with server_args and FLAGS, logging to $out/server_NAME.log, and waits
#       until it is healthy (server_wait_seconds, default 120); when it is
#       not, prints the end of its log and exits 1.
#   stop_server                   SIGTERM, then waits for it to exit.
# $server is the running server's pid, or empty (for the caller's EXIT trap).
server=

start_server() {
  local name=$1
  shift
  [ -z "$server" ] || stop_server
  "$bin/convserve-server" --listen="$address" "${server_args[@]}" "$@" \
    > "$out/server_$name.log" 2>&1 &
  server=$!
  "$bin/convserve-health" --server="$address" --wait_seconds="${server_wait_seconds:-120}" \
    > /dev/null || {
    echo "server $name did not start"
    tail -20 "$out/server_$name.log"
    exit 1
  }
}

stop_server() {
  kill -TERM "$server"
  wait "$server"
  server=
}
