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
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "${CONVSERVE_JOBS:-$(nproc)}" "$@"
if [ "${CONVSERVE_SANITIZERS:-1}" != 0 ] && [ $# -eq 0 ]; then
  "$root/scripts/sanitize.sh" asan
  "$root/scripts/sanitize.sh" tsan
fi
