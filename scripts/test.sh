#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test (GPU tests skip with a reason where no GPU is present).
# Then the sanitized builds (scripts/sanitize.sh): ASan+UBSan with the fuzz
# smoke run, and TSan; CONVSERVE_SANITIZERS=0 skips them.
# Extra arguments go to ctest, e.g. -L unit or -R graph_test (then the
# sanitized builds are skipped too).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_BUILD_DIR:-$root/build}"

# Each stage's wall time, and on failure the stage that failed, so CI's log
# says where the time went and what stopped it.
stage_name=""
stage_start=$SECONDS
stage() {
  stage_name="$1"
  stage_start=$SECONDS
  echo "test.sh: stage '$stage_name' started at $(date +%H:%M:%S)"
}
stage_done() {
  echo "test.sh: stage '$stage_name' took $((SECONDS - stage_start)) s"
}
on_exit() {
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "test.sh: stage '$stage_name' FAILED (exit $rc) after $((SECONDS - stage_start)) s," \
      "$SECONDS s in all" >&2
  fi
}
trap on_exit EXIT
# A signal to the script alone (a CI timeout) still ends it with a failure
# the exit message sees.
trap 'exit 143' TERM
trap 'exit 130' INT

stage setup; "$root/scripts/setup.sh"; stage_done
stage build; "$root/scripts/build.sh"; stage_done
cd "$build"
stage ctest; ctest --output-on-failure -j "${CONVSERVE_JOBS:-$(nproc)}" "$@"; stage_done
if [ "${CONVSERVE_SANITIZERS:-1}" != 0 ] && [ $# -eq 0 ]; then
  stage asan; "$root/scripts/sanitize.sh" asan; stage_done
  stage tsan; "$root/scripts/sanitize.sh" tsan; stage_done
fi
echo "test.sh: all stages passed in $SECONDS s"
