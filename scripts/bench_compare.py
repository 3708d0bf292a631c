#!/usr/bin/env python3
"""Sets convserve beside PyTorch on the same GPU (issue 12's fair benchmark).

Layers: joins tests/bench/conv_layer_bench's CSV (ours) and
scripts/bench_pytorch.py's CSV. Per layer: ours in µs, PyTorch's best variant
under CUDA-graph replay (the headline peer), the speedup over it, PyTorch's
eager figure and the speedup over that, the roofline floor and the fraction
of it ours reaches (floor / ours). Last: geometric means and how many layers
are slower.

Stacks: joins tests/bench/stack_bench's CSV and scripts/bench_pytorch_stacks.py's
CSV: GPU time per request of a multi-layer graph against PyTorch running the
same layers under graph replay.

Roofline floor = max(FLOPs / peak, bytes / bandwidth) with FLOPs =
2*N*K*P*Q*(C/groups)*R*S and bytes = input + weights + bias + output, the
input counted over the rows and columns some window reads (a 1x1 conv of
stride 2 reads a quarter of its input). Peaks
are dense tensor-core rates (float16; TF32 for float32) from the vendor's
datasheet for the device named in the PyTorch CSV, or given by --peaks.

Speedup = PyTorch µs / ours µs: above 1 means convserve is faster.

The headline lines take the channels-last (NHWC) rows: PyTorch's fastest
layout, so PyTorch at its best. NCHW rows (both sides NCHW) are summed up on
lines of their own.
"""
import argparse
import csv
import math
import sys

# (float16 dense TFLOP/s, TF32 dense TFLOP/s, memory GB/s), vendor datasheets.
PEAKS = {
    "H100 80GB HBM3": (989.4, 494.7, 3350.0),  # H100 SXM5
    "H100 PCIe": (756.0, 378.0, 2000.0),
    "H200": (989.4, 494.7, 4800.0),
}

# How the two layer figures are taken, printed above the table so a reader
# knows exactly what is compared (tests/bench/conv_layer_bench.cc and
# scripts/bench_pytorch.py).
LAYER_METHOD = """\
method (both): GPU time by CUDA events around back-to-back runs on device-resident
  tensors, no host copies; median over samples of the mean time per run (the
  samples and runs per sample are in the '# method' lines of each CSV).
  ours_us:   each run launches the layer's cuDNN plan (and the bias+activation
             kernel on the unfused path) from C++, one cudnnBackendExecute per
             layer, as a server with --cuda_graphs=false runs a layer.
  torch_us:  replays of a CUDA graph of calls_per_graph PyTorch calls (best of
             relu(conv2d) and torch.cudnn_convolution_relu), time per call: no
             Python or framework cost, and no graph launch cost either once a
             graph holds enough calls.
  where a layer is shorter than a host launch, ours_us measures the launch
  rate of cudnnBackendExecute.
  ours_graph_us (when present): calls_per_graph runs of the same compiled plan
             captured into one CUDA graph by the benchmark itself and replayed
             like PyTorch's, time per run, as the server (CUDA graphs on by
             default) replays a request's captured layers one after another:
             the headline figure, the same method on both sides.
  eager_us:  PyTorch's best variant called from Python, same event method."""

STACK_METHOD = """\
method: one request (one forward) at a time, GPU idle before it; CUDA events
  around the request's layers on the GPU, median over the timed requests.
  ours:  convserve's DevicePool (the server's runtime path, 1 worker, GPU 0),
         input and output in device memory read and written in place (no
         H2D/D2H), InferTimings.compute; wall = host time from Submit to done.
  torch: a CUDA graph of the whole stack, the better (torch_best_us) of one
         replay between two events (torch_graph_us, which includes Python's
         gap between the first event and the replay's start) and the mean per
         replay over back-to-back replays (torch_b2b_us, no such gap); the
         speedup is against the better, vs_single against one replay. Ours
         keeps its own host gap (the runtime's event before the graph's
         launch), so the comparison leans to PyTorch.
  convserve graphs have no residual add: PyTorch runs the same conv+bias+act
  sequence without the add either."""


def read_csv(path):
    """(metadata from '# key: value' lines, rows as dicts)."""
    meta = {}
    lines = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                key, sep, value = line[1:].partition(":")
                if sep:
                    meta.setdefault(key.strip(), value.strip())
            elif line.strip():
                lines.append(line)
    return meta, list(csv.DictReader(lines))


def read_shapes(path):
    shapes = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, *rest = line.split(",")
            shapes[name] = tuple(map(int, rest))
    return shapes


def number(row, *keys):
    """The first of `keys` present in `row` as a float; nan when none is or
    it is empty."""
    for key in keys:
        value = row.get(key)
        if value not in (None, ""):
            try:
                return float(value)
            except ValueError:
                return math.nan
    return math.nan


def ratio(a, b):
    """a / b, nan when either is missing or b is 0."""
    if math.isnan(a) or math.isnan(b) or b == 0:
        return math.nan
    return a / b


def geomean(values):
    values = [v for v in values if v > 0 and not math.isnan(v)]
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))


# The layouts of the headline: PyTorch's fastest (channels_last).
CHANNELS_LAST = ("NHWC", "NDHWC")


def read_extent(size, kernel, stride, pad, outputs):
    """Input rows (or columns) of `size` that some of the `outputs` windows
    of `kernel` taps, `stride` apart from -`pad`, read."""
    return len({o * stride - pad + i for o in range(outputs) for i in range(kernel)}
               & set(range(size)))


def floor_us(shape, n, dtype, peaks):
    c, h, w, k, r, s, stride, pad, groups = shape
    p = (h + 2 * pad - r) // stride + 1
    q = (w + 2 * pad - s) // stride + 1
    elt = 2 if dtype in ("float16", "bfloat16") else 4
    flops = 2.0 * n * k * p * q * (c // groups) * r * s
    read = read_extent(h, r, stride, pad, p) * read_extent(w, s, stride, pad, q)
    bytes_ = elt * (n * c * read + k * (c // groups) * r * s + k + n * k * p * q)
    peak = peaks[0] if elt == 2 else peaks[1]
    return max(flops / (peak * 1e12), bytes_ / (peaks[2] * 1e9)) * 1e6


def torch_layer_us(row):
    """(graph-replay best µs, its variant, eager best µs) of one PyTorch row;
    CSVs of the old eager-only script give (nan, '', eager)."""
    graph = number(row, "graph_best_ms") * 1e3
    eager = number(row, "eager_best_ms") * 1e3
    if "graph_best_ms" not in row:  # old format: torch_ms, torch_fused_ms, both eager
        candidates = [number(row, "torch_ms"), number(row, "torch_fused_ms")]
        candidates = [x for x in candidates if not math.isnan(x)]
        eager = min(candidates) * 1e3 if candidates else math.nan
    return graph, row.get("graph_best_variant", ""), eager


def fmt(value, width, digits=2):
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:{width}.{digits}f}"


def print_calls_per_graph(ours_meta, torch_meta, out):
    """Prints both CSVs' calls per graph; warns (here and on stderr) when
    they differ, since per-call figures of graphs of different sizes carry
    different shares of the replay's launch cost. A CSV without the line is
    from before the count existed, when each graph held one call."""
    def count(meta):
        text = meta.get("calls_per_graph")
        return (int(text), text) if text else (1, "1 (not recorded)")

    (ours_n, ours), (torch_n, torch) = count(ours_meta), count(torch_meta)
    print(f"calls per graph: convserve {ours}, pytorch {torch}", file=out)
    if ours_n != torch_n:
        warning = (f"WARNING: the two sides captured different numbers of calls per graph "
                   f"(convserve {ours}, pytorch {torch}): the graph figures are not comparable; "
                   f"rerun both with the same --calls_per_graph")
        print(warning, file=out)
        print(f"bench_compare: {warning}", file=sys.stderr)


def compare_layers(args, out):
    ours_meta, ours = read_csv(args.ours)
    torch_meta, theirs = read_csv(args.torch)
    shapes = read_shapes(args.shapes)
    device = torch_meta.get("device", "")
    if args.peaks:
        peaks = tuple(map(float, args.peaks.split(",")))
    else:
        peaks = next((v for k, v in PEAKS.items() if k in device), PEAKS["H100 80GB HBM3"])
    torch_rows = {(r["name"], r["batch"], r["dtype"], r["layout"]): r for r in theirs}
    # Whether the benchmark's own replay gave figures for layers with a peer.
    has_ours_graph = any(not math.isnan(number(r, "ours_graph_ms")) for r in ours
                         if (r["name"], r["batch"], r["dtype"], r["layout"]) in torch_rows
                         and r["name"] in shapes)
    selection = ours[0].get("selection", "") if ours else ""

    print(f"== layers: convserve ({selection}) vs PyTorch, {device}", file=out)
    for key in ("torch", "cudnn", "method"):
        if key in torch_meta:
            print(f"pytorch {key}: {torch_meta[key]}", file=out)
    for key in ("cudnn", "method"):
        if key in ours_meta:
            print(f"convserve {key}: {ours_meta[key]}", file=out)
    print(LAYER_METHOD, file=out)
    print_calls_per_graph(ours_meta, torch_meta, out)
    print(f"peaks: fp16 {peaks[0]} TFLOP/s, tf32 {peaks[1]} TFLOP/s, {peaks[2]} GB/s; "
          f"floor% = floor_us / ours_us; speedup = PyTorch / ours (>1: ours faster)", file=out)
    header = (f"{'layer':36} {'N':>3} {'dtype':8} {'layout':6} {'path':8} {'ours_us':>8} "
              f"{'torch_graph_us':>14} {'variant':11} {'speedup':>7} {'eager_us':>9} "
              f"{'vs_eager':>8} {'floor_us':>8} {'floor%':>6}")
    if has_ours_graph:
        header += f" {'ours_graph_us':>13} {'graph_vs_graph':>14} {'graph_floor%':>12}"
    print(header, file=out)

    joined = []
    missing = 0
    for r in ours:
        key = (r["name"], r["batch"], r["dtype"], r["layout"])
        if key not in torch_rows or r["name"] not in shapes:
            missing += 1
            continue
        n = int(r["batch"])
        ours_us = number(r, "ours_ms") * 1e3
        ours_graph_us = number(r, "ours_graph_ms") * 1e3
        graph_us, variant, eager_us = torch_layer_us(torch_rows[key])
        floor = floor_us(shapes[r["name"]], n, r["dtype"], peaks)
        speedup = ratio(graph_us, ours_us)
        eager_speedup = ratio(eager_us, ours_us)
        graph_speedup = ratio(graph_us, ours_graph_us)
        line = (f"{r['name']:36} {n:>3} {r['dtype']:8} {r['layout']:6} {r.get('path', ''):8} "
                f"{fmt(ours_us, 8)} "
                f"{fmt(graph_us, 14)} {variant or '-':11} {fmt(speedup, 7)} {fmt(eager_us, 9)} "
                f"{fmt(eager_speedup, 8)} {fmt(floor, 8)} {fmt(100 * ratio(floor, ours_us), 6, 1)}")
        if has_ours_graph:
            line += (f" {fmt(ours_graph_us, 13)} {fmt(graph_speedup, 14)}"
                     f" {fmt(100 * ratio(floor, ours_graph_us), 12, 1)}")
        print(line, file=out)
        joined.append({"layer": r["name"], "batch": n, "dtype": r["dtype"],
                       "layout": r["layout"], "path": r.get("path", ""), "ours_us": ours_us,
                       "torch_graph_us": graph_us, "torch_graph_variant": variant,
                       "speedup_vs_graph": speedup, "torch_eager_us": eager_us,
                       "speedup_vs_eager": eager_speedup, "floor_us": floor,
                       "floor_fraction": ratio(floor, ours_us), "ours_graph_us": ours_graph_us,
                       "ours_graph_speedup_vs_graph": graph_speedup,
                       "ours_graph_floor_fraction": ratio(floor, ours_graph_us)})
    if missing:
        print(f"({missing} rows of ours had no PyTorch row or no shape; left out)", file=out)

    def summary(label, speedups):
        finite = [s for s in speedups if not math.isnan(s)]
        if not finite:
            print(f"{label}: no layers with both figures", file=out)
            return
        slower = sum(s < 1.0 for s in finite)
        print(f"{label}: geometric-mean speedup {geomean(finite):.3f} over {len(finite)} "
              f"layers; {slower} layers slower than PyTorch", file=out)

    # The headline: the channels-last rows (PyTorch's fastest layout), ours
    # replayed from a CUDA graph (the server's default) against PyTorch's
    # replay, when the benchmark could capture our plans.
    ours_key = "ours_graph_us" if has_ours_graph else "ours_us"
    speedup_key = "ours_graph_speedup_vs_graph" if has_ours_graph else "speedup_vs_graph"
    headline = [row for row in joined if row["layout"] in CHANNELS_LAST]
    channels_first = [row for row in joined if row["layout"] not in CHANNELS_LAST]
    print("== layer summary (channels-last rows: PyTorch's fastest layout)", file=out)
    if has_ours_graph:
        summary("ours replayed from a CUDA graph (the server's default) vs PyTorch graph replay "
                "(headline)", [row["ours_graph_speedup_vs_graph"] for row in headline])
        unreplayed = [row["layer"] + f" N={row['batch']} " + row["dtype"] + " " + row["layout"]
                      for row in joined if math.isnan(row["ours_graph_us"])]
        if unreplayed:
            print(f"{len(unreplayed)} layers without a replayed figure (the capture failed: "
                  f"conv_layer_bench.err), left out of the lines on ours_graph_us below: "
                  f"{', '.join(unreplayed)}", file=out)
    summary("ours launched from the host per layer (--cuda_graphs=false) vs PyTorch graph replay",
            [row["speedup_vs_graph"] for row in headline])
    summary("ours launched from the host per layer vs PyTorch eager",
            [row["speedup_vs_eager"] for row in headline])
    for batch, dtype, layout in sorted({(row["batch"], row["dtype"], row["layout"])
                                        for row in joined}):
        summary(f"  N={batch} {dtype} {layout}, {ours_key} vs graph replay",
                [row[speedup_key] for row in joined if row["batch"] == batch
                 and row["dtype"] == dtype and row["layout"] == layout])
    batch1 = [row[ours_key] for row in headline
              if row["batch"] == 1 and not math.isnan(row[ours_key])]
    if batch1:
        print(f"N=1 layers within 5 us ({ours_key}): {sum(us <= 5.0 for us in batch1)} of "
              f"{len(batch1)}", file=out)
    slower = sorted((row for row in headline if row[speedup_key] < 1.0),
                    key=lambda row: row[speedup_key])
    if slower:
        print(f"slowest against PyTorch graph replay ({ours_key}; of {len(slower)} slower):",
              file=out)
        for row in slower[:args.worst]:
            print(f"  {row['layer']:34} N={row['batch']:<3} {row['dtype']:8} {row['path']:8} "
                  f"ours {row[ours_key]:.2f} us, PyTorch {row['torch_graph_us']:.2f} us "
                  f"({row['torch_graph_variant']}): {row[speedup_key]:.2f}x", file=out)
    if channels_first:
        summary("NCHW rows (both sides NCHW; not in the headline), "
                f"{ours_key} vs PyTorch graph replay",
                [row[speedup_key] for row in channels_first])
    if args.csv and joined:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(joined[0]))
            writer.writeheader()
            writer.writerows(joined)
    return joined


def compare_stacks(args, out):
    ours_meta, ours = read_csv(args.stacks_ours)
    torch_meta, theirs = read_csv(args.stacks_torch)
    torch_rows = {(r["stack"], r["batch"]): r for r in theirs}
    print(f"== stacks: convserve vs PyTorch under graph replay, {torch_meta.get('device', '')}",
          file=out)
    for key in ("selection", "method"):
        if key in ours_meta:
            print(f"convserve {key}: {ours_meta[key]}", file=out)
    print(STACK_METHOD, file=out)
    print(f"{'stack':28} {'N':>3} {'layers':>6} {'ours_us':>9} {'torch_best_us':>13} "
          f"{'speedup':>7} {'torch_graph_us':>14} {'torch_b2b_us':>12} {'vs_single':>9} "
          f"{'ours_mean_us':>12} {'ours_wall_us':>12} {'torch_eager_us':>14}", file=out)
    speedups = []
    for r in ours:
        t = torch_rows.get((r["stack"], r["batch"])) or {}
        ours_us = number(r, "gpu_median_us")
        single_us = number(t, "graph_median_us")
        b2b_us = number(t, "graph_b2b_us")
        best_us = min((v for v in (single_us, b2b_us) if not math.isnan(v)), default=math.nan)
        speedup = ratio(best_us, ours_us)
        speedups.append(speedup)
        print(f"{r['stack']:28} {int(r['batch']):>3} {r.get('layers', ''):>6} {fmt(ours_us, 9)} "
              f"{fmt(best_us, 13)} {fmt(speedup, 7)} {fmt(single_us, 14)} {fmt(b2b_us, 12)} "
              f"{fmt(ratio(single_us, ours_us), 9)} {fmt(number(r, 'gpu_mean_us'), 12)} "
              f"{fmt(number(r, 'wall_median_us'), 12)} "
              f"{fmt(number(t, 'eager_median_us'), 14)}", file=out)
    finite = [s for s in speedups if not math.isnan(s)]
    if finite:
        print(f"stacks: geometric-mean speedup {geomean(finite):.3f} over {len(finite)} stacks; "
              f"{sum(s < 1.0 for s in finite)} slower than PyTorch under graph replay "
              f"(its better figure)", file=out)
    else:
        print("stacks: no stack with both figures", file=out)
    return speedups


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", help="conv_layer_bench CSV")
    parser.add_argument("--torch", help="bench_pytorch.py CSV")
    parser.add_argument("--shapes", default="tests/bench/conv_shapes.csv")
    parser.add_argument("--peaks", default="", help="fp16_tflops,tf32_tflops,gbs")
    parser.add_argument("--csv", default="", help="also write the joined layer table here")
    parser.add_argument("--worst", type=int, default=10,
                        help="how many of the layers slower than PyTorch to list in the summary")
    parser.add_argument("--stacks_ours", help="stack_bench CSV")
    parser.add_argument("--stacks_torch", help="bench_pytorch_stacks.py CSV")
    args = parser.parse_args(argv)
    if bool(args.ours) != bool(args.torch) or bool(args.stacks_ours) != bool(args.stacks_torch):
        parser.error("give --ours with --torch, and --stacks_ours with --stacks_torch")
    if not args.ours and not args.stacks_ours:
        parser.error("nothing to compare: give --ours/--torch and/or --stacks_ours/--stacks_torch")
    if args.ours:
        compare_layers(args, sys.stdout)
    if args.stacks_ours:
        if args.ours:
            print(file=sys.stdout)
        compare_stacks(args, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
