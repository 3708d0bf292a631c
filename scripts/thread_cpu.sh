#!/usr/bin/env bash
# CPU time of a running process's threads over an interval, summed by thread
# name (convserve names its own: cs-gpu0-w0 a GPU worker, cs-answer0 a
# completion thread, cs-batcher, cs-cpu3, ...; gRPC's and other libraries'
# threads keep theirs). Prints one line per name: threads, cores used (CPU
# seconds per second) and, with REQUESTS (requests served in the interval),
# CPU microseconds per request.
#   scripts/thread_cpu.sh PID [SECONDS]
#   REQUESTS=123456 scripts/thread_cpu.sh PID 2
set -euo pipefail
pid=${1:?usage: thread_cpu.sh PID [SECONDS]}
seconds=${2:-2}
ticks=$(getconf CLK_TCK)

# snapshot: "PID TID NAME TICKS" per thread (the path's two numbers, the name
# with its spaces made underscores, utime + stime in clock ticks).
snapshot() {
  local stat line
  for stat in /proc/"$pid"/task/*/stat; do
    line=$(cat "$stat" 2>/dev/null) || continue
    local name=${line#*(}
    name=${name%)*}
    local rest=${line##*) }
    # fields after the name: state is 1, utime 12, stime 13
    set -- $rest
    echo "${stat//[^0-9]/ } ${name// /_} $(( ${12} + ${13} ))"
  done
}

[ -d /proc/"$pid" ] || { echo "thread_cpu.sh: no process $pid" >&2; exit 1; }
before=$(snapshot)
sleep "$seconds"
after=$(snapshot)
awk -v seconds="$seconds" -v ticks="$ticks" -v requests="${REQUESTS:-0}" '
  FNR == NR { start[$1 " " $2] = $4; next }
  {
    key = $1 " " $2
    used = $4 - ((key in start) ? start[key] : 0)
    name = $3
    sub(/[0-9]+$/, "", name)  # numbered threads (cs-answer0, cs-answer1) sum together
    cpu[name] += used; threads[name]++; total += used
  }
  END {
    printf "%-18s %7s %7s", "thread", "threads", "cores"
    if (requests > 0) printf " %12s", "us/request"
    printf "\n"
    n = 0
    for (name in cpu) order[n++] = name
    for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
      if (cpu[order[j]] > cpu[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 0; i < n; i++) {
      name = order[i]
      printf "%-18s %7d %7.2f", name, threads[name], cpu[name] / ticks / seconds
      if (requests > 0) printf " %12.1f", cpu[name] / ticks / requests * 1e6
      printf "\n"
    }
    printf "%-18s %7s %7.2f", "total", "", total / ticks / seconds
    if (requests > 0) printf " %12.1f", total / ticks / requests * 1e6
    printf "\n"
  }' <(echo "$before") <(echo "$after")
