#!/usr/bin/env bash
# The server on a Unix socket (--listen=unix:PATH): health answers there,
# convserve-load's requests through gRPC bytes and system shared memory
# match the CPU reference, and the socket serves nothing after a SIGTERM.
# Then one server on loopback TCP and a Unix socket at once
# (--listen=127.0.0.1:0,unix:PATH) answers on both, and a list with an
# address that cannot be bound stops the start with an error naming it.
# BIN: the directory of the built binaries.
set -uo pipefail
bin="${BIN:?BIN is the build directory}"
dir=$(mktemp -d)
socket="$dir/convserve.sock"
server=
trap '[ -n "$server" ] && kill -KILL $server 2>/dev/null; rm -rf "$dir"' EXIT
log="$dir/server.log"  # the running server's log, shown on failure
fail() { echo "FAIL: $*"; tail -20 "$log"; exit 1; }
# wait_listening: until the server's "listening on" line is in $log (health
# can answer before main() logs it), at most 30 s.
wait_listening() {
  for _ in $(seq 300); do
    grep -q "listening on" "$log" && return 0
    sleep 0.1
  done
  fail "no \"listening on\" line in the log within 30 s"
}

# serve ADDRESSES PROBE: a CPU server on ADDRESSES logging to $log, healthy
# when asked on PROBE and its "listening on" line logged.
serve() {
  "$bin/convserve-server" --listen="$1" --metrics_listen= --backend=cpu > "$log" 2>&1 &
  server=$!
  "$bin/convserve-health" --server="$2" --wait_seconds=30 > "$dir/health.log" 2>&1 ||
    fail "no health answer on $2: $(cat "$dir/health.log")"
  wait_listening
}
# verified NAME TARGET SHAPE FLAGS...: convserve-load's requests through
# TARGET match the CPU reference.
verified() {
  local name=$1 target=$2 shape=$3
  shift 3
  "$bin/convserve-load" --server="$target" \
    --graph_file="${CONVSERVE_SOURCE_DIR:?}/tests/bench/conv64_nhwc.textproto" \
    --input_shape="$shape" --protocol=kserve --verify "$@" > "$dir/load.log" 2>&1 ||
    fail "convserve-load ($name) failed: $(tail -3 "$dir/load.log")"
  grep -qE "^verify: [0-9]+ outputs checked, 0 mismatches" "$dir/load.log" ||
    fail "outputs ($name) not verified: $(grep verify "$dir/load.log")"
  echo "$name: $(grep -E '^verify' "$dir/load.log")"
}

serve "unix:$socket" "unix:$socket"
grep -q "listening on unix:$socket " "$log" || fail "the log does not name the socket"
for mode in none system; do
  verified "unix socket, shared memory $mode" "unix:$socket" 2,64,9,11 --shared_memory=$mode \
    --requests=4
done
kill -TERM $server
wait $server || fail "the server exited $? after SIGTERM"
server=
if "$bin/convserve-health" --server="unix:$socket" --wait_seconds=1 > /dev/null 2>&1; then
  fail "health still answers after the server stopped"
fi

# Two addresses: TCP first (its port is the one logged), then the socket.
socket2="$dir/both.sock"
log="$dir/server2.log"
serve "127.0.0.1:0, unix:$socket2" "unix:$socket2"
port=$(sed -n "s|.*listening on 127.0.0.1:0 (port \([0-9]*\)), unix:$socket2 (.*|\1|p" "$log")
[ -n "$port" ] && [ "$port" -gt 1 ] || fail "the log does not name both addresses: $(grep listening "$log")"
for target in "127.0.0.1:$port" "unix:$socket2"; do
  verified "both addresses, $target" "$target" 1,64,7,5 --requests=2
done
kill -TERM $server
wait $server || fail "the server of two addresses exited $? after SIGTERM"
server=

# A list whose second address cannot be bound (its directory does not
# exist): exit 2, and the error names that address.
bad="unix:$dir/missing/convserve.sock"
log="$dir/server3.log"
timeout 30 "$bin/convserve-server" --listen="127.0.0.1:0,$bad" --metrics_listen= --backend=cpu \
  > "$log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a server with an unbindable address exited $rc, not 2"
grep -q "cannot listen on '$bad'" "$log" || fail "the error does not name $bad"
log="$dir/server4.log"
timeout 30 "$bin/convserve-server" --listen=" , " --metrics_listen= --backend=cpu > "$log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "no address to listen on" "$log" || fail "an empty --listen list: exit $rc"
echo "PASS"
