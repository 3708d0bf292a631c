#!/usr/bin/env bash
# The README's run command: installs what is missing, builds, and starts the
# server with default flags on 0.0.0.0:8001.
#   scripts/run.sh                 serve until Ctrl-C / SIGTERM
#   scripts/run.sh --demo          also load deploy/examples/resnet_block and
#                                  send a short load run, then keep serving
#   scripts/run.sh -- --flag=...   pass flags to convserve-server
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_BUILD_DIR:-$root/build}"

demo=0
server_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --demo) demo=1 ;;
    --) shift; server_flags+=("$@"); break ;;
    *) echo "run.sh: unknown argument '$1' (use --demo, or -- then server flags)" >&2; exit 2 ;;
  esac
  shift
done

"$root/scripts/setup.sh" --packages-only
"$root/scripts/build.sh"

if [ "$demo" -eq 0 ]; then
  exec "$build/convserve-server" "${server_flags[@]}"
fi

listen="127.0.0.1:8001"
for flag in "${server_flags[@]}"; do
  case "$flag" in --listen=*) listen="${flag#--listen=}" ;; esac
done
client_address="${listen/0.0.0.0/127.0.0.1}"
"$build/convserve-server" "${server_flags[@]}" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid' INT TERM
# The gRPC health check says SERVING as soon as the server listens.
if ! "$build/convserve-health" --server="$client_address" --wait_seconds=60 --quiet; then
  echo "run.sh: the server did not report SERVING on $client_address within 60 s" >&2
  kill -TERM $server_pid 2>/dev/null
  wait $server_pid
  exit 1
fi
echo "--- demo: loading deploy/examples/resnet_block.textproto and sending 100 requests"
"$build/convserve-load" --server="$client_address" \
  --graph_file="$root/deploy/examples/resnet_block.textproto" --input_shape=1,3,64,64 --requests=100
echo "--- demo done; server still running on $listen (Ctrl-C stops it)"
wait $server_pid
