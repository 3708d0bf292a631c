#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test (GPU tests skip with a reason where no GPU is present).
# Extra arguments go to ctest, e.g. -L unit or -R graph_test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "${CONVSERVE_JOBS:-$(nproc)}" "$@"
