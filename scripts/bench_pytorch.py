#!/usr/bin/env python3
"""PyTorch peer for tests/bench/conv_layer_bench: the same conv + bias + ReLU
layers, batch sizes and dtype/layout pairs (float16 and float32 NHWC as
channels_last, PyTorch's fastest layout, and float32 NCHW), on
device-resident tensors, with cudnn.benchmark on and PyTorch's default TF32
setting.

PyTorch is timed at its best: each variant is warmed up on a side stream (so
cudnn.benchmark picks its algorithm outside the capture), --calls_per_graph
calls (default 10) are captured into one torch.cuda.CUDAGraph, and the graph
is replayed back to back between two CUDA events: median over --samples of
the mean time per call (a replay's time over the calls in it) over
--runs_per_sample replays. Several calls a graph because a graph replayed
from Python costs a few microseconds of host time a replay (a graph of one
tiny kernel replays at about 5 us on an H100), which would be timed instead
of the GPU for short layers; tests/bench/conv_layer_bench captures the same
count of its layer (--calls_per_graph). The same event method times plain
eager calls from Python as extra columns (they include Python's per-call
launch cost).

Variants: conv_relu = relu(conv2d(x, w, b)); cudnn_fused =
torch.cudnn_convolution_relu(x, w, b, ...) where this build has it (nan where
it has not or it fails for the shape).

CSV columns (milliseconds per run):
  name,batch,dtype,layout,
  graph_best_ms,graph_best_variant,graph_conv_relu_ms,graph_cudnn_fused_ms,
  eager_best_ms,eager_best_variant,eager_conv_relu_ms,eager_cudnn_fused_ms
Leading '# key: value' lines name the device and versions.
"""
import argparse
import math
import statistics
import sys
import time


def read_shapes(path):
    shapes = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, *rest = line.split(",")
            c, h, w, k, r, s, stride, pad, groups = map(int, rest)
            shapes.append((name, c, h, w, k, r, s, stride, pad, groups))
    return shapes


def events_ms(torch, fn, samples, runs):
    """Median over samples of the mean ms per call of `runs` back-to-back
    calls of fn between two CUDA events on the current stream."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(runs):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / runs)
    return statistics.median(times)


def warm_up(torch, fn, calls=3):
    """Runs fn on a side stream, as torch.cuda.graphs asks before a capture:
    cudnn.benchmark's algorithm search and lazy initialisation happen here."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(torch, fn, calls):
    """A CUDAGraph of `calls` calls of fn (warmed up before). The graph keeps
    its outputs alive in its private memory pool."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    return graph


def time_variant(torch, fn, samples, runs, calls, label):
    """(graph replay ms per call, eager ms) of one variant; nan for what
    fails."""
    try:
        warm_up(torch, fn)
    except RuntimeError as e:
        print(f"{label}: eager call failed: {str(e).splitlines()[0]}", file=sys.stderr)
        torch.cuda.synchronize()
        return math.nan, math.nan
    eager = events_ms(torch, fn, samples, runs)
    try:
        graph = capture(torch, fn, calls)
        graph.replay()
        torch.cuda.synchronize()
        replay = events_ms(torch, graph.replay, samples, runs) / calls
        del graph
    except RuntimeError as e:
        print(f"{label}: graph capture failed: {str(e).splitlines()[0]}", file=sys.stderr)
        torch.cuda.synchronize()
        replay = math.nan
    return replay, eager


def best(values):
    """(min, its name) over the non-nan values of a dict; (nan, '') if none."""
    finite = {k: v for k, v in values.items() if not math.isnan(v)}
    if not finite:
        return math.nan, ""
    name = min(finite, key=finite.get)
    return finite[name], name


def header(torch, calls):
    print(f"# device: {torch.cuda.get_device_name()}")
    print(f"# torch: {torch.__version__}; cudnn: {torch.backends.cudnn.version()}; "
          f"cuda: {torch.version.cuda}")
    try:  # newer releases also have cudnn.conv.fp32_precision; left at its default
        tf32 = torch.backends.cudnn.allow_tf32
    except (AttributeError, RuntimeError) as e:
        tf32 = f"unknown ({e})"
    print(f"# cudnn.benchmark: {torch.backends.cudnn.benchmark}; "
          f"cudnn.allow_tf32: {tf32} (PyTorch's default, not changed)")
    print("# method: CUDA events around back-to-back runs on device-resident tensors; "
          f"graph_* = replays of a torch.cuda.CUDAGraph of {calls} calls, time per call; "
          "eager_* = Python calls")
    print(f"# calls_per_graph: {calls}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="tests/bench/conv_shapes.csv")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--runs_per_sample", type=int, default=20)
    parser.add_argument("--calls_per_graph", type=int, default=10,
                        help="calls captured into one graph; graph_* is a replay over this "
                             "(conv_layer_bench --calls_per_graph must match)")
    args = parser.parse_args()
    calls_per_graph = max(args.calls_per_graph, 1)

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("bench_pytorch: skipped: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    header(torch, calls_per_graph)
    print("name,batch,dtype,layout,graph_best_ms,graph_best_variant,graph_conv_relu_ms,"
          "graph_cudnn_fused_ms,eager_best_ms,eager_best_variant,eager_conv_relu_ms,"
          "eager_cudnn_fused_ms", flush=True)
    has_fused = hasattr(torch, "cudnn_convolution_relu")
    variants = [(torch.float16, "float16", "NHWC"), (torch.float32, "float32", "NHWC"),
                (torch.float32, "float32", "NCHW")]
    begin = time.monotonic()
    for name, c, h, w, k, r, s, stride, pad, groups in read_shapes(args.shapes):
        for batch in map(int, args.batches.split(",")):
            for dtype, dtype_name, layout in variants:
                fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
                x = torch.randn(batch, c, h, w, device="cuda", dtype=dtype).to(memory_format=fmt)
                wt = (torch.randn(k, c // groups, r, s, device="cuda", dtype=dtype) * 0.1).to(
                    memory_format=fmt)
                b = torch.randn(k, device="cuda", dtype=dtype) * 0.1
                calls = {
                    "conv_relu": lambda: torch.relu(F.conv2d(x, wt, b, stride, pad, 1, groups)),
                }
                if has_fused:
                    calls["cudnn_fused"] = lambda: torch.cudnn_convolution_relu(
                        x, wt, b, [stride, stride], [pad, pad], [1, 1], groups)
                graph_ms = {"conv_relu": math.nan, "cudnn_fused": math.nan}
                eager_ms = dict(graph_ms)
                with torch.no_grad():
                    for variant, fn in calls.items():
                        graph_ms[variant], eager_ms[variant] = time_variant(
                            torch, fn, args.samples, args.runs_per_sample, calls_per_graph,
                            f"{name} N={batch} {dtype_name} {variant}")
                graph_best, graph_which = best(graph_ms)
                eager_best, eager_which = best(eager_ms)
                print(f"{name},{batch},{dtype_name},{layout},{graph_best:.5f},{graph_which},"
                      f"{graph_ms['conv_relu']:.5f},{graph_ms['cudnn_fused']:.5f},"
                      f"{eager_best:.5f},{eager_which},{eager_ms['conv_relu']:.5f},"
                      f"{eager_ms['cudnn_fused']:.5f}", flush=True)
    print(f"bench_pytorch: {time.monotonic() - begin:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
