#!/usr/bin/env python3
"""scripts/bench_pytorch.py end to end against a stand-in `torch` module with
a simulated GPU clock, so its plumbing (warm-up, capture of --calls_per_graph
calls into one graph, replay, the division by the calls, the eager columns,
the best variant, the CSV and its '# calls_per_graph' line) is checked
without a GPU or PyTorch.

The stand-in's clock: conv2d takes 2 us of GPU time, relu 1 us,
cudnn_convolution_relu 2.5 us; a graph replay takes max(5 us, the sum of its
kernels) (the host's replay rate is the floor of a short graph); an eager
call takes its kernels plus 10 us of Python. So ten calls a graph time the
kernels (2.5 us a call for the fused variant) and one call a graph times the
5 us floor."""
import csv
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "bench_pytorch.py")

FAKE_TORCH = textwrap.dedent('''\
    """A stand-in for the parts of torch that scripts/bench_pytorch.py uses."""
    import contextlib
    import types

    __version__ = "0.0-fake"
    float16, float32 = "float16", "float32"
    channels_last, contiguous_format = "channels_last", "contiguous_format"
    version = types.SimpleNamespace(cuda="13.0")

    CONV_US, RELU_US, FUSED_US, REPLAY_FLOOR_US, PYTHON_US = 2.0, 1.0, 2.5, 5.0, 10.0
    _clock = [0.0]          # simulated GPU time, us
    _capturing = [None]     # the graph being captured, if any
    log = []                # what ran, for the test's eyes (kernel names)


    def _kernel(name, us):
        if _capturing[0] is not None:
            _capturing[0].kernels.append(us)
            _capturing[0].names.append(name)
        else:
            _clock[0] += us + PYTHON_US
            log.append(name)


    class Tensor:
        def to(self, memory_format=None):
            return self

        def __mul__(self, other):
            return self


    def randn(*shape, device=None, dtype=None):
        return Tensor()


    def relu(x):
        _kernel("relu", RELU_US)
        return Tensor()


    def cudnn_convolution_relu(x, w, b, stride, padding, dilation, groups):
        _kernel("fused", FUSED_US)
        return Tensor()


    @contextlib.contextmanager
    def no_grad():
        yield


    class _Cudnn:
        benchmark = False
        allow_tf32 = True

        @staticmethod
        def version():
            return 91900


    backends = types.SimpleNamespace(cudnn=_Cudnn)


    class _Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = _clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return (other.at - self.at) / 1000.0  # ms


    class _Stream:
        def wait_stream(self, other):
            pass


    class CUDAGraph:
        def __init__(self):
            self.kernels, self.names = [], []

        def replay(self):
            _clock[0] += max(REPLAY_FLOOR_US, sum(self.kernels))
            log.append("replay:" + "+".join(self.names))


    @contextlib.contextmanager
    def _graph(g):
        _capturing[0] = g
        try:
            yield
        finally:
            _capturing[0] = None


    @contextlib.contextmanager
    def _stream(s):
        yield


    cuda = types.SimpleNamespace(
        is_available=lambda: True, get_device_name=lambda: "Fake GPU",
        Event=_Event, Stream=_Stream, stream=_stream, current_stream=lambda: _Stream(),
        synchronize=lambda: None, CUDAGraph=CUDAGraph, graph=_graph)
    ''')

FAKE_FUNCTIONAL = textwrap.dedent('''\
    import torch


    def conv2d(x, w, b, stride, padding, dilation, groups):
        torch._kernel("conv", torch.CONV_US)
        return torch.Tensor()
    ''')

SHAPES = "# name,C,H,W,K,R,S,stride,pad,groups\nlayer_a,8,5,5,8,3,3,1,1,1\n"


class BenchPytorchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        fake = os.path.join(self.dir.name, "fake")
        os.makedirs(os.path.join(fake, "torch", "nn"))
        for path, text in ((("torch", "__init__.py"), FAKE_TORCH),
                           (("torch", "nn", "__init__.py"), ""),
                           (("torch", "nn", "functional.py"), FAKE_FUNCTIONAL)):
            with open(os.path.join(fake, *path), "w") as f:
                f.write(text)
        self.fake = fake
        self.shapes = os.path.join(self.dir.name, "shapes.csv")
        with open(self.shapes, "w") as f:
            f.write(SHAPES)

    def run_bench(self, *args):
        env = dict(os.environ, PYTHONPATH=self.fake)
        result = subprocess.run(
            [sys.executable, SCRIPT, "--shapes", self.shapes, "--batches", "1", "--samples", "3",
             "--runs_per_sample", "4", *args],
            capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        meta = [line for line in result.stdout.splitlines() if line.startswith("#")]
        rows = list(csv.DictReader(line for line in result.stdout.splitlines()
                                   if not line.startswith("#")))
        return meta, rows

    def test_ten_calls_a_graph_time_the_kernels_not_the_replay_floor(self):
        meta, rows = self.run_bench()  # the default: 10 calls a graph
        self.assertIn("# calls_per_graph: 10", meta)
        self.assertEqual(len(rows), 3)  # float16 NHWC, float32 NHWC, float32 NCHW
        for row in rows:
            # conv + relu: 3 us a call; fused: 2.5 us a call, the best.
            self.assertAlmostEqual(float(row["graph_conv_relu_ms"]), 0.003, places=6)
            self.assertAlmostEqual(float(row["graph_cudnn_fused_ms"]), 0.0025, places=6)
            self.assertAlmostEqual(float(row["graph_best_ms"]), 0.0025, places=6)
            self.assertEqual(row["graph_best_variant"], "cudnn_fused")
            # Eager: the kernels plus 10 us of Python a kernel.
            self.assertAlmostEqual(float(row["eager_conv_relu_ms"]), 0.023, places=6)
            self.assertAlmostEqual(float(row["eager_cudnn_fused_ms"]), 0.0125, places=6)
            self.assertEqual(row["eager_best_variant"], "cudnn_fused")

    def test_one_call_a_graph_times_the_replay_floor(self):
        meta, rows = self.run_bench("--calls_per_graph", "1")
        self.assertIn("# calls_per_graph: 1", meta)
        for row in rows:
            self.assertAlmostEqual(float(row["graph_conv_relu_ms"]), 0.005, places=6)
            self.assertAlmostEqual(float(row["graph_cudnn_fused_ms"]), 0.005, places=6)

    def test_three_calls_a_graph_divide_by_three(self):
        # 3 fused calls = 7.5 us a replay, over the 5 us floor: 2.5 us a call;
        # 3 conv + relu = 9 us: 3 us a call.
        meta, rows = self.run_bench("--calls_per_graph", "3")
        self.assertIn("# calls_per_graph: 3", meta)
        self.assertAlmostEqual(float(rows[0]["graph_cudnn_fused_ms"]), 0.0025, places=6)
        self.assertAlmostEqual(float(rows[0]["graph_conv_relu_ms"]), 0.003, places=6)


if __name__ == "__main__":
    unittest.main()
