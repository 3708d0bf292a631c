#!/usr/bin/env bash
# Installs the Debian 12 packages convserve needs, only those missing, and
# the Python environment of the tests that use NVIDIA's Triton client
# (tests/integration/tritonclient_test.py): a venv of Debian's python3 in
# .venv-tests/ (git-ignored) with pinned packages from PyPI.
#   scripts/setup.sh                   packages and the test venv
#   scripts/setup.sh --packages-only   packages only (serving, image builds)
#   scripts/setup.sh --perf-analyzer   also download NVIDIA's perf_analyzer wheel
#                                      (pinned) into .perf-analyzer/ (git-ignored)
#                                      for scripts/perf_analyzer_compare.sh on a
#                                      GPU host, which reaches no registry
# Idempotent: a second run installs nothing and prints one line.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

test_venv=1
perf_analyzer=0
case "${1:-}" in
  "") ;;
  --packages-only) test_venv=0 ;;
  --perf-analyzer) perf_analyzer=1 ;;
  *) echo "setup.sh: unknown argument '$1' (use --packages-only, --perf-analyzer or nothing)" >&2
     exit 2 ;;
esac

PACKAGES=(
  g++ cmake make pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libssl-dev prometheus-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-venv
  prometheus curl python3-yaml yamllint docker-compose
  openssl
  clang-14 libclang-rt-14-dev llvm-14
)

# The test venv's packages, every one pinned (tritonclient's dependencies
# too), so a re-run resolves to the same set.
VENV="$root/.venv-tests"
VENV_PACKAGES=(
  "tritonclient[grpc]==2.73.0"
  grpcio==1.85.1 protobuf==6.33.6 numpy==2.4.6 ml_dtypes==0.5.4
  python-rapidjson==1.25 urllib3==2.8.0 packaging==26.3 typing_extensions==4.16.0
)
# perf_analyzer's wheel: one static-ish binary (needs glibc >= 2.38, zlib and
# OpenSSL 3 on the host), 7.2 MB; the GPU host unpacks it with python3.
PERF_ANALYZER=perf-analyzer==2.60.0
PERF_ANALYZER_DIR="$root/.perf-analyzer"
# Written into the venv once its packages are installed: the venv is up to
# date when this matches the list above.
VENV_STAMP="$VENV/convserve-packages.txt"

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

venv_current() {
  [ -x "$VENV/bin/python" ] &&
    [ "$(cat "$VENV_STAMP" 2>/dev/null)" = "$(printf '%s\n' "${VENV_PACKAGES[@]}")" ] &&
    "$VENV/bin/python" -c "import tritonclient.grpc, tritonclient.utils.shared_memory" 2>/dev/null
}

venv_note=""
if [ "$test_venv" -eq 1 ]; then
  if venv_current; then
    venv_note=", test venv .venv-tests up to date"
  else
    echo "setup: creating the test venv .venv-tests (${VENV_PACKAGES[0]}, from PyPI)"
    rm -rf "$VENV"
    # Debian's python3 (python3-venv), not whichever python3 is first on PATH.
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input \
      "${VENV_PACKAGES[@]}"
    printf '%s\n' "${VENV_PACKAGES[@]}" >"$VENV_STAMP"
    venv_current || { echo "setup: the test venv does not import tritonclient" >&2; exit 1; }
  fi
fi

if [ ${#missing[@]} -eq 0 ] && { [ "$test_venv" -eq 0 ] || [ -n "$venv_note" ]; }; then
  echo "setup: all ${#PACKAGES[@]} packages present${venv_note}"
fi

if [ "$perf_analyzer" -eq 1 ]; then
  if ls "$PERF_ANALYZER_DIR"/perf_analyzer-2.60.0-*.whl >/dev/null 2>&1; then
    echo "setup: $PERF_ANALYZER wheel present in .perf-analyzer/"
  else
    # Built for manylinux_2_38: pip must not judge it by this host's glibc.
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-input --no-deps \
      --only-binary=:all: --platform manylinux_2_38_x86_64 -d "$PERF_ANALYZER_DIR" \
      "$PERF_ANALYZER"
    echo "setup: downloaded $(basename "$PERF_ANALYZER_DIR"/perf_analyzer-*.whl)" \
      "($(du -h "$PERF_ANALYZER_DIR"/perf_analyzer-*.whl | cut -f1)) into .perf-analyzer/"
  fi
fi
