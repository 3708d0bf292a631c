#!/usr/bin/env bash
# The server on a Unix socket (--listen=unix:PATH): health answers there,
# convserve-load's requests through gRPC bytes and system shared memory
# match the CPU reference, and the socket serves nothing after a SIGTERM.
# BIN: the directory of the built binaries.
set -uo pipefail
bin="${BIN:?BIN is the build directory}"
dir=$(mktemp -d)
socket="$dir/convserve.sock"
server=
trap '[ -n "$server" ] && kill -KILL $server 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$dir/server.log"; exit 1; }

"$bin/convserve-server" --listen="unix:$socket" --metrics_listen= --backend=cpu \
  > "$dir/server.log" 2>&1 &
server=$!
"$bin/convserve-health" --server="unix:$socket" --wait_seconds=30 > "$dir/health.log" 2>&1 ||
  fail "no health answer on unix:$socket: $(cat "$dir/health.log")"
grep -q "listening on unix:$socket" "$dir/server.log" || fail "the log does not name the socket"
for mode in none system; do
  "$bin/convserve-load" --server="unix:$socket" \
    --graph_file="${CONVSERVE_SOURCE_DIR:?}/tests/bench/conv64_nhwc.textproto" \
    --input_shape=2,64,9,11 --protocol=kserve --shared_memory=$mode --verify --requests=4 \
    > "$dir/load_$mode.log" 2>&1 || fail "convserve-load ($mode) failed: $(tail -3 "$dir/load_$mode.log")"
  grep -qE "^verify: [0-9]+ outputs checked, 0 mismatches" "$dir/load_$mode.log" ||
    fail "outputs ($mode) not verified: $(grep verify "$dir/load_$mode.log")"
  echo "unix socket, shared memory $mode: $(grep -E '^verify' "$dir/load_$mode.log")"
done
kill -TERM $server
wait $server || fail "the server exited $? after SIGTERM"
server=
if "$bin/convserve-health" --server="unix:$socket" --wait_seconds=1 > /dev/null 2>&1; then
  fail "health still answers after the server stopped"
fi
echo "PASS"
