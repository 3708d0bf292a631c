#!/usr/bin/env python3
"""PyTorch peer for tests/bench/conv_layer_bench: the same conv + bias + ReLU
layers, batch sizes and dtype/layout pairs, timed the same way (CUDA events
around back-to-back runs on device-resident tensors; median over samples of
the mean time per run). cudnn.benchmark is on, TF32 is PyTorch's default.

Prints CSV: name,batch,dtype,layout,torch_ms,torch_fused_ms where torch_ms is
relu(conv2d(x, w, b)) and torch_fused_ms is torch.cudnn_convolution_relu.
The first line is '# device: <name>'.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


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


def time_ms(fn, samples, runs):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="tests/bench/conv_shapes.csv")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--runs_per_sample", type=int, default=20)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"# device: {torch.cuda.get_device_name()}")
    print("name,batch,dtype,layout,torch_ms,torch_fused_ms")
    variants = [(torch.float16, "float16", "NHWC"), (torch.float32, "float32", "NCHW")]
    for name, c, h, w, k, r, s, stride, pad, groups in read_shapes(args.shapes):
        for batch in map(int, args.batches.split(",")):
            for dtype, dtype_name, layout in variants:
                fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
                x = torch.randn(batch, c, h, w, device="cuda", dtype=dtype).to(memory_format=fmt)
                wt = (torch.randn(k, c // groups, r, s, device="cuda", dtype=dtype) * 0.1).to(
                    memory_format=fmt)
                b = torch.randn(k, device="cuda", dtype=dtype) * 0.1
                with torch.no_grad():
                    plain = time_ms(
                        lambda: torch.relu(F.conv2d(x, wt, b, stride, pad, 1, groups)),
                        args.samples, args.runs_per_sample)
                    try:
                        fused = time_ms(
                            lambda: torch.cudnn_convolution_relu(
                                x, wt, b, [stride, stride], [pad, pad], [1, 1], groups),
                            args.samples, args.runs_per_sample)
                    except RuntimeError:
                        fused = float("nan")
                print(f"{name},{batch},{dtype_name},{layout},{plain:.5f},{fused:.5f}", flush=True)


if __name__ == "__main__":
    main()
