#!/usr/bin/env bash
# CPU time of a running process's threads over an interval, summed by thread
# name (convserve names its own: cs-gpu0-w0 a GPU worker, cs-answer0 a
# completion thread, cs-batcher, cs-cpu3, ...; gRPC's and other libraries'
# threads keep theirs). Prints one line per name: threads, cores used (CPU
# seconds per second), sleeps per second (voluntary context switches: each is
# a wait that ended in a wake-up, the thread's own or another's hand-off)
# and, with REQUESTS (requests served in the interval), CPU microseconds and
# sleeps per request.
#   scripts/thread_cpu.sh PID [SECONDS]
#   REQUESTS=123456 scripts/thread_cpu.sh PID 2
set -euo pipefail
pid=${1:?usage: thread_cpu.sh PID [SECONDS]}
seconds=${2:-2}
ticks=$(getconf CLK_TCK)

# snapshot: "PID TID NAME TICKS SLEEPS" per thread (the path's two numbers,
# the name with its spaces made underscores, utime + stime in clock ticks,
# voluntary context switches). Bash builtins only, no process per thread, so
# a snapshot stays short on a busy machine.
snapshot() {
  local stat line sleeps key value
  for stat in /proc/"$pid"/task/*/stat; do
    { read -r line < "$stat"; } 2>/dev/null || continue
    sleeps=""
    while read -r key value; do
      if [ "$key" = "voluntary_ctxt_switches:" ]; then sleeps=$value; break; fi
    done 2>/dev/null < "${stat%stat}status" || continue
    [ -n "$sleeps" ] || continue  # the thread ended while it was read
    local name=${line#*(}
    name=${name%)*}
    local rest=${line##*) }
    # fields after the name: state is 1, utime 12, stime 13
    set -- $rest
    echo "${stat//[^0-9]/ } ${name// /_} $(( ${12} + ${13} )) ${sleeps:-0}"
  done
}

[ -d /proc/"$pid" ] || { echo "thread_cpu.sh: no process $pid" >&2; exit 1; }
# Rates are over the measured time between the snapshots' midpoints, not the
# nominal $seconds: a thread's two readings are that far apart, snapshot
# time included.
now_us() { local t=${EPOCHREALTIME/[^0-9]/}; echo "$t"; }
start=$(now_us)
before=$(snapshot)
middle_before=$(( (start + $(now_us)) / 2 ))
sleep "$seconds"
start=$(now_us)
after=$(snapshot)
middle_after=$(( (start + $(now_us)) / 2 ))
elapsed=$(awk -v us=$(( middle_after - middle_before )) 'BEGIN { printf "%.6f", us / 1e6 }')
echo "thread_cpu.sh: rates over ${elapsed} s between the snapshots (asked: ${seconds} s)" >&2
awk -v seconds="$elapsed" -v ticks="$ticks" -v requests="${REQUESTS:-0}" '
  FNR == NR { start[$1 " " $2] = $4; slept[$1 " " $2] = $5; next }
  {
    key = $1 " " $2
    used = $4 - ((key in start) ? start[key] : 0)
    sleeps = $5 - ((key in slept) ? slept[key] : 0)
    name = $3
    sub(/[0-9]+$/, "", name)  # numbered threads (cs-answer0, cs-answer1) sum together
    cpu[name] += used; nap[name] += sleeps; threads[name]++; total += used; naps += sleeps
  }
  function row(name, count, used, sleeps) {
    printf "%-18s %7s %7.2f %9.0f", name, count, used / ticks / seconds, sleeps / seconds
    if (requests > 0) {
      printf " %12.1f %16.2f", used / ticks / requests * 1e6, sleeps / requests
    }
    printf "\n"
  }
  END {
    printf "%-18s %7s %7s %9s", "thread", "threads", "cores", "sleeps/s"
    if (requests > 0) printf " %12s %16s", "us/request", "sleeps/request"
    printf "\n"
    n = 0
    for (name in cpu) order[n++] = name
    for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
      if (cpu[order[j]] > cpu[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 0; i < n; i++) row(order[i], threads[order[i]], cpu[order[i]], nap[order[i]])
    row("total", "", total, naps)
  }' <(echo "$before") <(echo "$after")
