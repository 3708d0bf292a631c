#!/usr/bin/env bash
# Configures and builds convserve into build/ (or $CONVSERVE_BUILD_DIR).
# Extra arguments go to cmake, e.g. -DCONVSERVE_CUDA=OFF.
# RelWithDebInfo with -g1 instead of CMake's -g: line tables and function
# names, enough for a symbolized backtrace from a core or a sanitizer, no
# local variables. It compiles about a third faster (three heavy files:
# 33 s against 50 s on the 2-core development machine), which keeps CI's
# fresh-clone run within its 30 minutes. Pass -DCMAKE_CXX_FLAGS_RELWITHDEBINFO
# (and _CUDA_) to change it.
# A unity build (CMake's UNITY_BUILD: a target's C++ files compiled a batch
# at a time, so the headers they share are parsed once per batch) unless
# CONVSERVE_UNITY_BUILD=OFF; CUDA files and protoc's output stay per file.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CONVSERVE_BUILD_DIR:-$root/build}"
jobs="${CONVSERVE_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" --no-warn-unused-cli \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -Xcompiler=-g1 -DNDEBUG" \
  -DCMAKE_UNITY_BUILD="${CONVSERVE_UNITY_BUILD:-ON}" "$@" >/dev/null
cmake --build "$build" -j "$jobs"
