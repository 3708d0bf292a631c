#!/usr/bin/env python3
"""PyTorch peer for tests/bench/stack_bench: the same multi-layer graphs
(read from the same textproto files: layer shapes, stride, padding, groups,
activation), random weights of the same shapes, float16 NHWC as
channels_last, cudnn.benchmark on, PyTorch's default TF32 setting.

Each stack's forward (conv2d + bias, then the layer's activation, layer after
layer; no residual add, as convserve graphs have none) is warmed up on a side
stream, captured into one torch.cuda.CUDAGraph and timed like a convserve
request: one replay at a time, the GPU idle before it, CUDA events around it
(graph_median_us, graph_mean_us over --requests replays), and also back to
back (graph_b2b_us: mean per replay of --runs_per_sample replays, median over
--samples). Variants: conv_act (F.conv2d then relu / relu6 / nothing) and
cudnn_fused (torch.cudnn_convolution_relu for plain-ReLU layers, conv_act for
the rest); the better one by median is reported. eager_median_us is the same
forward called from Python, one at a time.

CSV columns: stack,batch,dtype,layout,layers,requests,graph_median_us,
graph_mean_us,graph_b2b_us,graph_variant,eager_median_us.
"""
import argparse
import math
import re
import statistics
import sys

# The GraphDef fields the stacks use (proto/convserve/v1/convserve.proto).
_TOKEN = re.compile(r'\s*(?:#[^\n]*|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*|'
                    r'[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?|[{}\[\]:,])')


def _tokens(text):
    pos = 0
    out = []
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"textproto: cannot parse at offset {pos}: {text[pos:pos + 20]!r}")
        token = match.group().strip()
        pos = match.end()
        if token and not token.startswith("#"):
            out.append(token)
    return out


def _scalar(token):
    if token.startswith('"'):
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")
    try:
        return int(token)
    except ValueError:
        try:
            return float(token)
        except ValueError:
            return token  # enum name


def _message(tokens, i, end):
    """Parses fields until `end` ('}' or None); returns (dict of lists, i)."""
    fields = {}
    while i < len(tokens) and tokens[i] != end:
        name = tokens[i]
        i += 1
        if tokens[i] == ":":
            i += 1
        if tokens[i] == "{":
            value, i = _message(tokens, i + 1, "}")
            i += 1
            fields.setdefault(name, []).append(value)
        elif tokens[i] == "[":
            i += 1
            while tokens[i] != "]":
                if tokens[i] != ",":
                    fields.setdefault(name, []).append(_scalar(tokens[i]))
                i += 1
            i += 1
        else:
            fields.setdefault(name, []).append(_scalar(tokens[i]))
            i += 1
    return fields, i


def parse_textproto(text):
    """A protobuf text-format message as {field: [values]}, nested messages as
    dicts: enough for convserve's GraphDef files, no protobuf needed."""
    fields, _ = _message(_tokens(text), 0, None)
    return fields


def _one(fields, name, default):
    return fields.get(name, [default])[0]


def _pair(fields, name, default):
    values = fields.get(name, [])
    if not values:
        return (default, default)
    if len(values) != 2:
        raise ValueError(f"{name}: 2-D stacks only, got {values}")
    return tuple(values)


def read_stack(path):
    """(name, dtype, layout, input channels, layers) of a GraphDef textproto;
    each layer a dict: in_channels, out_channels, kernel, stride, dilation,
    pad_before, pad_after, groups, activation ('identity', 'relu',
    'relu_clip'), clip."""
    with open(path) as f:
        graph = parse_textproto(f.read())
    channels = _one(graph, "input_channels", 0)
    layers = []
    for layer in graph.get("layers", []):
        activation = _one(layer, "activation", {})
        kind = _one(activation, "kind", "IDENTITY")
        if kind not in ("IDENTITY", "RELU"):
            raise ValueError(f"{path}: activation {kind} is not supported by this benchmark")
        if _one(activation, "negative_slope", 0):
            raise ValueError(f"{path}: leaky ReLU is not supported by this benchmark")
        clip = _one(activation, "upper_clip", None)
        groups = max(_one(layer, "groups", 1), 1)
        spec = {
            "name": _one(layer, "name", ""),
            "in_channels": channels,
            "out_channels": _one(layer, "out_channels", 0),
            "kernel": _pair(layer, "kernel_size", 1),
            "stride": _pair(layer, "stride", 1),
            "dilation": _pair(layer, "dilation", 1),
            "pad_before": _pair(layer, "pad_before", 0),
            "pad_after": _pair(layer, "pad_after", 0),
            "groups": groups,
            "activation": "identity" if kind == "IDENTITY" else
                          ("relu_clip" if clip is not None else "relu"),
            "clip": clip,
        }
        if spec["pad_before"] != spec["pad_after"]:
            raise ValueError(f"{path}: asymmetric padding is not supported by this benchmark")
        layers.append(spec)
        channels = spec["out_channels"]
    return (_one(graph, "name", path), _one(graph, "data_type", "FLOAT32"),
            _one(graph, "layout", "NCHW"), _one(graph, "input_channels", 0), layers)


def make_forward(torch, layers, x, dtype, fused):
    """The stack's forward over fresh random weights (fan-in scaled, so values
    stay O(1) through the stack)."""
    F = torch.nn.functional
    params = []
    for layer in layers:
        kh, kw = layer["kernel"]
        fan_in = layer["in_channels"] // layer["groups"] * kh * kw
        w = (torch.rand(layer["out_channels"], layer["in_channels"] // layer["groups"], kh, kw,
                        device="cuda", dtype=torch.float32) * 2 - 1) / math.sqrt(fan_in)
        b = torch.rand(layer["out_channels"], device="cuda", dtype=torch.float32) * 0.2 - 0.1
        params.append((w.to(dtype).contiguous(memory_format=torch.channels_last), b.to(dtype)))

    def forward():
        y = x
        for layer, (w, b) in zip(layers, params):
            stride, pad, dilation = list(layer["stride"]), list(layer["pad_before"]), list(
                layer["dilation"])
            if fused and layer["activation"] == "relu":
                y = torch.cudnn_convolution_relu(y, w, b, stride, pad, dilation, layer["groups"])
                continue
            y = F.conv2d(y, w, b, stride, pad, dilation, layer["groups"])
            if layer["activation"] == "relu":
                y = torch.relu(y)
            elif layer["activation"] == "relu_clip":
                y = torch.clamp(y, 0.0, layer["clip"]) if layer["clip"] != 6 else F.relu6(y)
        return y

    return forward


def per_request_us(torch, fn, requests):
    """fn timed one call at a time with the GPU idle before each: CUDA events
    around it on the current stream; (median, mean) µs."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(requests):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times), statistics.fmean(times)


def back_to_back_us(torch, fn, samples, runs):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(runs):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / runs)
    return statistics.median(times)


def time_stack(torch, forward, args):
    """{graph_median_us, graph_mean_us, graph_b2b_us, eager_median_us}."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager_median, _ = per_request_us(torch, forward, max(args.requests // 4, 20))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    torch.cuda.synchronize()
    for _ in range(args.warmup):
        graph.replay()
    torch.cuda.synchronize()
    median, mean = per_request_us(torch, graph.replay, args.requests)
    b2b = back_to_back_us(torch, graph.replay, args.samples, args.runs_per_sample)
    return {"graph_median_us": median, "graph_mean_us": mean, "graph_b2b_us": b2b,
            "eager_median_us": eager_median}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", default="tests/bench/resnet50_bottleneck_stack.textproto,"
                        "tests/bench/mobilenetv2_block_stack.textproto")
    parser.add_argument("--input_hw", default="56,56", help="input H,W of every stack")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--requests", type=int, default=500, help="timed single replays")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--runs_per_sample", type=int, default=20)
    args = parser.parse_args()
    h, w = map(int, args.input_hw.split(","))
    stacks = [read_stack(path) for path in args.stacks.split(",")]

    import torch

    if not torch.cuda.is_available():
        print("bench_pytorch_stacks: skipped: torch.cuda.is_available() is False",
              file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    dtypes = {"FLOAT16": torch.float16, "BFLOAT16": torch.bfloat16, "FLOAT32": torch.float32}
    print(f"# device: {torch.cuda.get_device_name()}")
    print(f"# torch: {torch.__version__}; cudnn: {torch.backends.cudnn.version()}")
    print(f"# method: graph_median/mean = one CUDAGraph replay at a time between CUDA events, "
          f"{args.requests} replays after {args.warmup}; graph_b2b = mean per replay of "
          f"{args.runs_per_sample} back-to-back replays, median of {args.samples}")
    print("stack,batch,dtype,layout,layers,requests,graph_median_us,graph_mean_us,graph_b2b_us,"
          "graph_variant,eager_median_us", flush=True)
    for name, dtype_name, layout, channels, layers in stacks:
        dtype = dtypes[dtype_name]
        fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
        for batch in map(int, args.batches.split(",")):
            x = (torch.rand(batch, channels, h, w, device="cuda") * 2 - 1).to(dtype).contiguous(
                memory_format=fmt)
            results = {}
            with torch.no_grad():
                for variant, fused in (("conv_act", False), ("cudnn_fused", True)):
                    if fused and not (hasattr(torch, "cudnn_convolution_relu") and
                                      any(l["activation"] == "relu" for l in layers)):
                        continue
                    try:
                        results[variant] = time_stack(
                            torch, make_forward(torch, layers, x, dtype, fused), args)
                    except RuntimeError as e:
                        print(f"# {name} N={batch} {variant}: {str(e).splitlines()[0]}",
                              file=sys.stderr)
                        torch.cuda.synchronize()
            if not results:
                print(f"{name},{batch},{dtype_name.lower()},{layout},{len(layers)},0,"
                      "nan,nan,nan,,nan", flush=True)
                continue
            variant = min(results, key=lambda v: results[v]["graph_median_us"])
            r = results[variant]
            eager = min(v["eager_median_us"] for v in results.values())
            print(f"{name},{batch},{dtype_name.lower()},{layout},{len(layers)},{args.requests},"
                  f"{r['graph_median_us']:.2f},{r['graph_mean_us']:.2f},{r['graph_b2b_us']:.2f},"
                  f"{variant},{eager:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
