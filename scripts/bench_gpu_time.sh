#!/usr/bin/env bash
# Issue 12's fair benchmark, in one command on a GPU host, from the
# repository root with a bundle (scripts/bundle.sh build bundle):
#   bash scripts/bench_gpu_time.sh
# 1. layers: tests/bench/conv_layer_bench (ours) and scripts/bench_pytorch.py
#    (PyTorch under CUDA-graph replay, eager as extra columns) on
#    tests/bench/conv_shapes.csv (or $SHAPES), joined by scripts/bench_compare.py;
# 2. stacks: tests/bench/stack_bench (DevicePool, device-resident input and
#    output) and scripts/bench_pytorch_stacks.py on the ResNet-50 bottleneck
#    and MobileNetV2 stacks, N=1 and 32, float16 NHWC.
# Everything is written under $OUT (default: a new temporary directory), eight
# files at most: ours_layers.csv, torch_layers.csv, compare_layers.txt (the
# full per-layer table), compare_layers.csv, ours_stacks.csv,
# torch_stacks.csv, compare_stacks.txt, and logs.tar.gz (each step's stderr,
# nvidia-smi -L). The short tables are printed last. A missing binary, a
# failing step or a missing PyTorch is reported and the next part runs.
# It took 108 s on an H100 (host N in docs/cudnn.md, 2026-11-27); each step has a
# timeout (variables below), so a run ends within 9 minutes.
#
# Variables: BUNDLE (bundle), OUT, PYTHON (python3), SELECTION (autotune, the
# server's default engine selection), SAMPLES (15), RUNS (20),
# SHAPES (tests/bench/conv_shapes.csv) and BATCHES (1,32): the layers'
# shapes and batch sizes, for both sides; CALLS_PER_GRAPH (10: layer calls
# captured into one graph on both sides; the per-call figure of a graph of
# one call is the host's replay rate for short layers), REQUESTS (500),
# PARTS ("layers stacks"), LAYER_TIMEOUT (200), TORCH_TIMEOUT (150),
# STACK_TIMEOUT (90), TORCH_STACK_TIMEOUT (90), and OURS_CUDNN, the cuDNN
# our two programs load: "system" (the default: the loader's, through
# LD_LIBRARY_PATH or the system's), "torch" (the one PyTorch's wheel ships
# and runs on, found through $PYTHON, so both sides run one cuDNN), or a
# directory holding libcudnn.so.9. The CSVs' "# cudnn:" lines name the
# version each side ran.
set -uo pipefail
bundle="${BUNDLE:-bundle}"
python="${PYTHON:-python3}"
selection="${SELECTION:-autotune}"
samples="${SAMPLES:-15}"
runs="${RUNS:-20}"
calls_per_graph="${CALLS_PER_GRAPH:-10}"
shapes="${SHAPES:-tests/bench/conv_shapes.csv}"
batches="${BATCHES:-1,32}"
requests="${REQUESTS:-500}"
parts="${PARTS:-layers stacks}"
given_ld="${LD_LIBRARY_PATH:-}"
case "$bundle" in
  /*) bundle_lib="$bundle/lib" ;;
  *) bundle_lib="$PWD/$bundle/lib" ;;
esac
export LD_LIBRARY_PATH="$bundle_lib${given_ld:+:$given_ld}"
bin="$bundle/bin"
# ours_ld: our programs' LD_LIBRARY_PATH, with OURS_CUDNN's directories
# after the bundle's lib/ (which holds no cuDNN). Checked before anything is
# created or timed.
ours_cudnn="${OURS_CUDNN:-system}"
ours_ld="$LD_LIBRARY_PATH"
case "$ours_cudnn" in
  system) ;;
  torch)
    # PyTorch's wheels load cuDNN (nvidia.cudnn) and CUDA's libraries
    # (nvidia.cu13, where present) from site-packages.
    cudnn_dirs=$("$python" - <<'PY' 2>/dev/null
import importlib, os
for name in ("nvidia.cudnn", "nvidia.cu13"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for path in module.__path__:
        if os.path.isdir(os.path.join(path, "lib")):
            print(os.path.join(path, "lib"))
PY
    )
    cudnn_dirs=$(echo "$cudnn_dirs" | paste -sd: -)
    where="PyTorch's nvidia.cudnn package, through $python"
    ;;
  /*) cudnn_dirs="$ours_cudnn" where="the directory given" ;;
  *) cudnn_dirs="$PWD/$ours_cudnn" where="the directory given" ;;
esac
if [ "$ours_cudnn" != system ]; then
  found=""
  IFS=: read -ra dirs <<< "$cudnn_dirs"
  for dir in ${dirs[@]+"${dirs[@]}"}; do [ -e "$dir/libcudnn.so.9" ] && found="$dir"; done
  if [ -z "$found" ]; then
    echo "OURS_CUDNN=$ours_cudnn: no libcudnn.so.9 in '${cudnn_dirs}' ($where); nothing was run" >&2
    exit 2
  fi
  ours_ld="$bundle_lib:$cudnn_dirs${given_ld:+:$given_ld}"
fi
# At most eight files under $out (the CSVs and tables, and the logs packed
# into one archive at the end), so a harness that returns only a few files
# returns them all. Each step's stderr is written outside $out, in $logs.
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/convserve_bench.XXXXXX")}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/convserve_bench_logs.XXXXXX")"
mkdir -p "$out"
summary=()
start_all=$SECONDS

# step NAME TIMEOUT STDOUT_FILE COMMAND...: runs one part, records its status
# and time; on failure prints the reason (the end of its stderr).
step() {
  local name="$1" limit="$2" stdout="$3"
  shift 3
  local started=$SECONDS
  echo "--- $name ($(date +%H:%M:%S), timeout ${limit}s)"
  timeout "$limit" "$@" > "$stdout" 2> "$logs/$name.err"
  local rc=$?
  local took=$((SECONDS - started))
  local rows
  rows=$(grep -v '^#' "$stdout" 2>/dev/null | tail -n +2 | grep -c .)  # less the header
  if [ $rc -eq 0 ]; then
    summary+=("$name: ok, $rows rows, ${took}s")
  else
    local why="exit $rc"
    [ $rc -eq 124 ] && why="timed out after ${limit}s"
    summary+=("$name: FAILED ($why), $rows rows, ${took}s; see $logs/$name.err")
    echo "$name: FAILED ($why); last lines of $logs/$name.err:"
    tail -n 8 "$logs/$name.err" | sed 's/^/    /'
  fi
  grep -h "skipped" "$logs/$name.err" 2>/dev/null | head -3
  return $rc
}

# have_binary NAME: the bundle has it, or say so.
have_binary() {
  if [ -x "$bin/$1" ]; then return 0; fi
  echo "--- $1: skipped: $bin/$1 is missing (build with CUDA, then scripts/bundle.sh build $bundle)"
  summary+=("$1: skipped, $bin/$1 missing")
  return 1
}

# have_torch: python3 imports torch with a GPU, or say why not.
torch_reason=""
have_torch() {
  if [ -z "$torch_reason" ]; then
    torch_reason=$("$python" -c 'import torch; print("ok" if torch.cuda.is_available() else "torch.cuda.is_available() is False")' 2>&1 | tail -n 1)
  fi
  if [ "$torch_reason" = "ok" ]; then return 0; fi
  echo "--- PyTorch: skipped: $torch_reason"
  summary+=("$1: skipped, PyTorch unusable: $torch_reason")
  return 1
}

has_rows() { [ -s "$1" ] && [ "$(grep -cv '^#' "$1")" -gt 1 ]; }

echo "convserve GPU-time benchmark; logs and CSVs in $out"
[ "$ours_cudnn" = system ] || echo "ours on the cuDNN in $cudnn_dirs (OURS_CUDNN=$ours_cudnn)"
nvidia-smi -L 2>&1 | tee "$logs/device.txt"

if [[ " $parts " == *" layers "* ]]; then
  if have_binary conv_layer_bench; then
    step conv_layer_bench "${LAYER_TIMEOUT:-200}" "$out/ours_layers.csv" \
      env LD_LIBRARY_PATH="$ours_ld" "$bin/conv_layer_bench" --engine_selection="$selection" --samples="$samples" \
      --runs_per_sample="$runs" --calls_per_graph="$calls_per_graph" --shapes="$shapes" \
      --batches="$batches"
  fi
  if have_torch bench_pytorch; then
    step bench_pytorch "${TORCH_TIMEOUT:-150}" "$out/torch_layers.csv" \
      "$python" scripts/bench_pytorch.py --samples="$samples" --runs_per_sample="$runs" \
      --calls_per_graph="$calls_per_graph" --shapes="$shapes" --batches="$batches"
  fi
fi

if [[ " $parts " == *" stacks "* ]]; then
  if have_binary stack_bench; then
    step stack_bench "${STACK_TIMEOUT:-90}" "$out/ours_stacks.csv" \
      env LD_LIBRARY_PATH="$ours_ld" "$bin/stack_bench" --engine_selection="$selection" --requests="$requests"
  fi
  if have_torch bench_pytorch_stacks; then
    step bench_pytorch_stacks "${TORCH_STACK_TIMEOUT:-90}" "$out/torch_stacks.csv" \
      "$python" scripts/bench_pytorch_stacks.py --requests="$requests" --samples="$samples" \
      --runs_per_sample="$runs"
  fi
fi

# Partial CSVs (a step that timed out) are still compared: rows are flushed
# one by one.
if has_rows "$out/ours_layers.csv" && has_rows "$out/torch_layers.csv"; then
  "$python" scripts/bench_compare.py --ours "$out/ours_layers.csv" \
    --torch "$out/torch_layers.csv" --csv "$out/compare_layers.csv" \
    > "$out/compare_layers.txt" 2> "$logs/compare_layers.err" ||
    { summary+=("compare layers: FAILED, see $logs/compare_layers.err"); tail -n 5 "$logs/compare_layers.err"; }
fi
if has_rows "$out/ours_stacks.csv" && has_rows "$out/torch_stacks.csv"; then
  "$python" scripts/bench_compare.py --stacks_ours "$out/ours_stacks.csv" \
    --stacks_torch "$out/torch_stacks.csv" \
    > "$out/compare_stacks.txt" 2> "$logs/compare_stacks.err" ||
    { summary+=("compare stacks: FAILED, see $logs/compare_stacks.err"); tail -n 5 "$logs/compare_stacks.err"; }
fi

echo
echo "=== layers: summary (full per-layer table: $out/compare_layers.txt)"
if [ -s "$out/compare_layers.txt" ]; then
  sed -n '1,/^peaks:/{/^==/p;/^pytorch/p;/^convserve/p;/^calls per graph/p;/^WARNING/p}' \
    "$out/compare_layers.txt"
  sed -n '/^== layer summary/,$p' "$out/compare_layers.txt"
else
  echo "no layer comparison (a side is missing; see the steps below)"
fi
echo
echo "=== stacks ($out/compare_stacks.txt)"
if [ -s "$out/compare_stacks.txt" ]; then
  sed -n '/^stack /,$p' "$out/compare_stacks.txt"
else
  echo "no stack comparison (a side is missing; see the steps below)"
  has_rows "$out/ours_stacks.csv" && grep -v '^#' "$out/ours_stacks.csv"
fi
tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
echo
echo "=== steps ($((SECONDS - start_all))s in all; CSVs and tables in $out, logs in $out/logs.tar.gz and $logs)"
printf '%s\n' "${summary[@]}"
