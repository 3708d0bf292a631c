#!/usr/bin/env bash
# Configures and builds convserve into build/ (or $CONVSERVE_BUILD_DIR).
# Extra arguments go to cmake, e.g. -DCONVSERVE_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_BUILD_DIR:-$root/build}"
jobs="${CONVSERVE_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$build" -j "$jobs"
