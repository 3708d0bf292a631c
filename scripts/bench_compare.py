#!/usr/bin/env python3
"""Joins conv_layer_bench (ours) and bench_pytorch.py CSVs into one table with
the roofline floor per layer, and prints the geometric-mean speedup of ours
over PyTorch's best of its two variants.

Roofline floor = max(FLOPs / peak, bytes / bandwidth) with FLOPs =
2*N*K*P*Q*(C/groups)*R*S and bytes = input + weights + bias + output. Peaks
are dense tensor-core rates (float16; TF32 for float32) from the vendor's
datasheet for the device named in the PyTorch CSV, or given by flags.
"""
import argparse
import csv
import math

# (float16 dense TFLOP/s, TF32 dense TFLOP/s, memory GB/s), vendor datasheets.
PEAKS = {
    "H100 80GB HBM3": (989.4, 494.7, 3350.0),  # H100 SXM5
    "H100 PCIe": (756.0, 378.0, 2000.0),
    "H200": (989.4, 494.7, 4800.0),
}


def read_csv(path):
    device = ""
    rows = []
    with open(path) as f:
        lines = []
        for line in f:
            if line.startswith("# device:"):
                device = line.split(":", 1)[1].strip()
            elif not line.startswith("#"):
                lines.append(line)
    for row in csv.DictReader(lines):
        rows.append(row)
    return device, rows


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours", required=True)
    parser.add_argument("--torch", required=True)
    parser.add_argument("--shapes", default="tests/bench/conv_shapes.csv")
    parser.add_argument("--peaks", default="", help="fp16_tflops,tf32_tflops,gbs")
    args = parser.parse_args()
    _, ours = read_csv(args.ours)
    device, theirs = read_csv(args.torch)
    shapes = read_shapes(args.shapes)
    if args.peaks:
        peaks = tuple(map(float, args.peaks.split(",")))
    else:
        peaks = next((v for k, v in PEAKS.items() if k in device), PEAKS["H100 80GB HBM3"])
    torch_rows = {(r["name"], r["batch"], r["dtype"], r["layout"]): r for r in theirs}
    print(f"device: {device}; peaks fp16 {peaks[0]} TFLOP/s, tf32 {peaks[1]} TFLOP/s, "
          f"{peaks[2]} GB/s")
    header = (f"{'layer':36} {'N':>3} {'dtype':8} {'path':8} {'ours_us':>9} {'torch_us':>9} "
              f"{'t_fused_us':>10} {'floor_us':>9} {'speedup':>8}")
    print(header)
    speedups = []
    slower = 0
    for r in ours:
        key = (r["name"], r["batch"], r["dtype"], r["layout"])
        if key not in torch_rows:
            continue
        t = torch_rows[key]
        c, h, w, k, rr, ss, stride, pad, groups = shapes[r["name"]]
        n = int(r["batch"])
        p = (h + 2 * pad - rr) // stride + 1
        q = (w + 2 * pad - ss) // stride + 1
        elt = 2 if r["dtype"] == "float16" else 4
        flops = 2.0 * n * k * p * q * (c // groups) * rr * ss
        bytes_ = elt * (n * c * h * w + k * (c // groups) * rr * ss + k + n * k * p * q)
        peak = peaks[0] if elt == 2 else peaks[1]
        floor_us = max(flops / (peak * 1e12), bytes_ / (peaks[2] * 1e9)) * 1e6
        ours_us = float(r["ours_ms"]) * 1e3
        plain_us = float(t["torch_ms"]) * 1e3
        fused_us = float(t["torch_fused_ms"]) * 1e3
        best = min(x for x in (plain_us, fused_us) if not math.isnan(x))
        speedup = best / ours_us
        speedups.append(speedup)
        slower += speedup < 1.0
        print(f"{r['name']:36} {n:>3} {r['dtype']:8} {r['path']:8} {ours_us:9.2f} {plain_us:9.2f} "
              f"{fused_us:10.2f} {floor_us:9.2f} {speedup:8.2f}")
    if speedups:
        geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        print(f"geometric-mean speedup over PyTorch's best: {geomean:.3f} over {len(speedups)} "
              f"layers; {slower} layers slower than PyTorch")


if __name__ == "__main__":
    main()
