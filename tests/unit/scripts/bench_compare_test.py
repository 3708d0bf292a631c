#!/usr/bin/env python3
"""scripts/bench_compare.py on synthetic CSVs: the join, speedups against
PyTorch's graph-replay and eager figures, geometric means, slower-layer
counts, the headline (ours replayed) and the host-launch figures beside it,
batch-1 layers within 5 us, the roofline floor, old eager-only PyTorch CSVs,
missing figures, and the stack table. Runs without a GPU or PyTorch."""
import contextlib
import io
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_compare  # noqa: E402

SHAPES = """\
# name,C,H,W,K,R,S,stride,pad,groups
a_1x1,64,56,56,64,1,1,1,0,1
b_3x3,64,56,56,64,3,3,1,1,1
c_dw,144,56,56,144,3,3,1,1,144
"""

OURS = """\
# method: ours test method line
# calls_per_graph: 10
name,batch,dtype,layout,selection,path,engine,ours_ms,ours_graph_ms
a_1x1,1,float16,NHWC,autotune,fused,3,0.00800,0.00400
b_3x3,1,float16,NHWC,autotune,fused,4,0.01000,0.00500
c_dw,32,float16,NHWC,autotune,unfused,7,0.05000,
d_unknown,1,float16,NHWC,autotune,fused,1,0.01000,0.01000
"""

# The same layers without the benchmark's own graph replay (a capture that
# failed everywhere, or an older conv_layer_bench).
OURS_HOST_ONLY = """\
# method: ours test method line
name,batch,dtype,layout,selection,path,engine,ours_ms,ours_graph_ms
a_1x1,1,float16,NHWC,autotune,fused,3,0.00800,
b_3x3,1,float16,NHWC,autotune,fused,4,0.01000,
c_dw,32,float16,NHWC,autotune,unfused,7,0.05000,
d_unknown,1,float16,NHWC,autotune,fused,1,0.01000,
"""

TORCH = """\
# device: NVIDIA H100 80GB HBM3
# torch: 2.11.0; cudnn: 91400; cuda: 13.0
# calls_per_graph: 10
name,batch,dtype,layout,graph_best_ms,graph_best_variant,graph_conv_relu_ms,graph_cudnn_fused_ms,eager_best_ms,eager_best_variant,eager_conv_relu_ms,eager_cudnn_fused_ms
a_1x1,1,float16,NHWC,0.00400,cudnn_fused,0.00500,0.00400,0.02400,cudnn_fused,0.04000,0.02400
b_3x3,1,float16,NHWC,0.02000,conv_relu,0.02000,nan,0.04000,conv_relu,0.04000,nan
c_dw,32,float16,NHWC,0.10000,conv_relu,0.10000,0.50000,0.20000,conv_relu,0.20000,0.60000
"""

TORCH_OLD = """\
# device: NVIDIA H100 80GB HBM3
name,batch,dtype,layout,torch_ms,torch_fused_ms
a_1x1,1,float16,NHWC,0.04000,0.02400
b_3x3,1,float16,NHWC,0.04000,nan
"""

STACKS_OURS = """\
# selection: autotune
# method: ours stack method line
stack,batch,dtype,layout,layers,requests,gpu_median_us,gpu_mean_us,wall_median_us,wall_mean_us
resnet,1,float16,NHWC,9,500,100.0,110.0,140.0,150.0
resnet,32,float16,NHWC,9,500,400.0,410.0,450.0,460.0
mobile,1,float16,NHWC,6,500,50.0,55.0,70.0,75.0
"""

STACKS_TORCH = """\
# device: NVIDIA H100 80GB HBM3
stack,batch,dtype,layout,layers,requests,graph_median_us,graph_mean_us,graph_b2b_us,graph_variant,eager_median_us
resnet,1,float16,NHWC,9,500,50.0,52.0,40.0,cudnn_fused,200.0
resnet,32,float16,NHWC,9,500,800.0,810.0,790.0,conv_act,900.0
"""


class BenchCompareTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_compare(self, *argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(bench_compare.main(list(argv)), 0)
        return out.getvalue()

    def layer_args(self, torch_text=TORCH, ours_text=OURS):
        return ["--ours", self.write("ours.csv", ours_text), "--torch",
                self.write("torch.csv", torch_text), "--shapes", self.write("shapes.csv", SHAPES),
                "--csv", os.path.join(self.dir.name, "joined.csv")]

    def test_speedups_are_torch_over_ours_against_graph_replay_and_eager(self):
        text = self.run_compare(*self.layer_args())
        _, rows = bench_compare.read_csv(os.path.join(self.dir.name, "joined.csv"))
        by_name = {r["layer"]: r for r in rows}
        self.assertEqual(sorted(by_name), ["a_1x1", "b_3x3", "c_dw"])  # d_unknown has no peer
        self.assertAlmostEqual(float(by_name["a_1x1"]["speedup_vs_graph"]), 0.5)
        self.assertAlmostEqual(float(by_name["a_1x1"]["speedup_vs_eager"]), 3.0)
        self.assertAlmostEqual(float(by_name["b_3x3"]["speedup_vs_graph"]), 2.0)
        self.assertAlmostEqual(float(by_name["c_dw"]["speedup_vs_graph"]), 2.0)
        self.assertEqual(by_name["a_1x1"]["torch_graph_variant"], "cudnn_fused")
        # Host launches: geometric mean of 0.5, 2, 2 = 2^(1/3); one layer slower.
        self.assertIn(f"ours launched from the host per layer (--cuda_graphs=false) vs PyTorch "
                      f"graph replay: geometric-mean speedup {2 ** (1 / 3):.3f} over 3 layers; "
                      f"1 layers slower", text)
        # Eager: 3, 4, 4.
        self.assertIn(f"ours launched from the host per layer vs PyTorch eager: geometric-mean "
                      f"speedup {(48) ** (1 / 3):.3f} over 3 layers; 0 layers slower", text)
        self.assertIn("(1 rows of ours had no PyTorch row or no shape; left out)", text)
        self.assertIn("NVIDIA H100 80GB HBM3", text)
        self.assertIn("ours test method line", text)
        self.assertIn("method (both)", text)

    def test_graph_replay_is_the_headline_and_decides_the_details(self):
        text = self.run_compare(*self.layer_args())
        header = next(line for line in text.splitlines() if line.startswith("layer "))
        self.assertEqual(header.split()[-3:], ["ours_graph_us", "graph_vs_graph", "graph_floor%"])
        # a: 4/4 = 1.0, b: 20/5 = 4.0, c: no figure -> 2 layers, none slower.
        self.assertIn("ours replayed from a CUDA graph (the server's default) vs PyTorch graph "
                      "replay (headline): geometric-mean speedup 2.000 over 2 layers; 0 layers "
                      "slower", text)
        self.assertIn("N=1 float16 NHWC, ours_graph_us vs graph replay: geometric-mean speedup 2.000 "
                      "over 2", text)
        self.assertIn("N=32 float16 NHWC, ours_graph_us vs graph replay: no layers with both figures",
                      text)
        self.assertIn("N=1 layers within 5 us (ours_graph_us): 2 of 2", text)
        self.assertNotIn("slowest against", text)  # a is level (1.00x), not slower
        # c_dw has no replayed figure: named as left out.
        self.assertIn("1 layers without a replayed figure (the capture failed: "
                      "conv_layer_bench.err), left out of the lines on ours_graph_us below: "
                      "c_dw N=32 float16", text)
        _, rows = bench_compare.read_csv(os.path.join(self.dir.name, "joined.csv"))
        b = next(r for r in rows if r["layer"] == "b_3x3")
        self.assertAlmostEqual(float(b["ours_graph_floor_fraction"]),
                               float(b["floor_us"]) / 5.0, places=6)

    def test_a_graph_figure_without_a_peer_does_not_make_the_headline(self):
        ours = OURS_HOST_ONLY.replace("d_unknown,1,float16,NHWC,autotune,fused,1,0.01000,",
                                      "d_unknown,1,float16,NHWC,autotune,fused,1,0.01000,0.01")
        text = self.run_compare(*self.layer_args(ours_text=ours))
        self.assertNotIn("(headline)", text)
        self.assertIn("N=1 layers within 5 us (ours_us): 0 of 2", text)

    def test_without_graph_figures_host_launches_decide_the_details(self):
        text = self.run_compare(*self.layer_args(ours_text=OURS_HOST_ONLY))
        self.assertNotIn("(headline)", text)
        self.assertIn("slowest against PyTorch graph replay (ours_us; of 1 slower):", text)
        self.assertRegex(text, r"\n  a_1x1 +N=1 +float16 +fused +ours 8.00 us, PyTorch 4.00 us "
                               r"\(cudnn_fused\): 0.50x")
        self.assertIn("N=1 float16 NHWC, ours_us vs graph replay: geometric-mean speedup 1.000 over 2",
                      text)
        self.assertIn("N=1 layers within 5 us (ours_us): 0 of 2", text)

    def test_floor_is_roofline_of_flops_and_bytes(self):
        self.run_compare(*self.layer_args())
        _, rows = bench_compare.read_csv(os.path.join(self.dir.name, "joined.csv"))
        a = next(r for r in rows if r["layer"] == "a_1x1")
        flops = 2.0 * 1 * 64 * 56 * 56 * 64
        bytes_ = 2 * (64 * 56 * 56 + 64 * 64 + 64 + 64 * 56 * 56)
        expected = max(flops / 989.4e12, bytes_ / 3350e9) * 1e6
        self.assertAlmostEqual(float(a["floor_us"]), expected, places=6)
        self.assertAlmostEqual(float(a["floor_fraction"]), expected / 8.0, places=6)

    def test_nchw_rows_are_summed_up_apart_from_the_headline(self):
        # A float32 NCHW row beside the channels-last ones: PyTorch runs it
        # NCHW too, which is not its fastest layout, so it stays out of the
        # headline, the batch-1 count and the slower list.
        ours = OURS + "a_1x1,1,float32,NCHW,autotune,fused,3,0.00200,0.00100\n"
        torch = TORCH + ("a_1x1,1,float32,NCHW,0.00400,conv_relu,0.00400,nan,0.00800,"
                         "conv_relu,0.00800,nan\n")
        text = self.run_compare(*self.layer_args(torch, ours))
        self.assertIn("float32  NCHW", text)
        self.assertIn("(headline): geometric-mean speedup 2.000 over 2 layers", text)
        self.assertIn("N=1 float32 NCHW, ours_graph_us vs graph replay: geometric-mean speedup "
                      "4.000 over 1 layers", text)
        self.assertIn("N=1 layers within 5 us (ours_graph_us): 2 of 2", text)
        self.assertIn("NCHW rows (both sides NCHW; not in the headline), ours_graph_us vs "
                      "PyTorch graph replay: geometric-mean speedup 4.000 over 1 layers", text)
        # Made slower, it is not listed among the headline's slower layers.
        ours = OURS + "a_1x1,1,float32,NCHW,autotune,fused,3,0.00800,0.00800\n"
        text = self.run_compare(*self.layer_args(torch, ours))
        self.assertNotIn("slowest against", text)
        self.assertIn("geometric-mean speedup 0.500 over 1 layers; 1 layers slower", text)

    def test_floor_counts_the_input_a_strided_conv_reads(self):
        peaks = (989.4, 494.7, 3350.0)
        # A 1x1 conv of stride 2 on 56x56 reads rows and columns 0, 2, ..., 54.
        self.assertEqual(bench_compare.read_extent(56, 1, 2, 0, 28), 28)
        # A 3x3 of stride 1 or 2 with padding 1 reads every row; a 7x7 of
        # stride 2, padding 3 on 224 too.
        self.assertEqual(bench_compare.read_extent(56, 3, 1, 1, 56), 56)
        self.assertEqual(bench_compare.read_extent(56, 3, 2, 1, 28), 56)
        self.assertEqual(bench_compare.read_extent(224, 7, 2, 3, 112), 224)
        # 2x2 windows 3 apart skip every third row: 0,1, 3,4, 6,7 of 0..8.
        self.assertEqual(bench_compare.read_extent(9, 2, 3, 0, 3), 6)
        downsample = (256, 56, 56, 512, 1, 1, 2, 0, 1)
        n = 32
        bytes_ = 2 * (n * 256 * 28 * 28 + 512 * 256 + 512 + n * 512 * 28 * 28)
        flops = 2.0 * n * 512 * 28 * 28 * 256
        expected = max(flops / 989.4e12, bytes_ / 3350e9) * 1e6
        self.assertAlmostEqual(bench_compare.floor_us(downsample, n, "float16", peaks), expected,
                               places=6)

    def test_old_eager_only_torch_csv_has_no_headline(self):
        text = self.run_compare(*self.layer_args(TORCH_OLD))
        self.assertIn("vs PyTorch graph replay (headline): no layers with both figures", text)
        self.assertIn(f"vs PyTorch eager: geometric-mean speedup {math.sqrt(12):.3f} over 2", text)

    def test_stacks_table_and_geomean(self):
        text = self.run_compare("--stacks_ours", self.write("so.csv", STACKS_OURS),
                                "--stacks_torch", self.write("st.csv", STACKS_TORCH))
        lines = text.splitlines()
        resnet1 = next(l for l in lines if l.startswith("resnet") and l.split()[1] == "1")
        # PyTorch's better figure is its back-to-back replays (40 < 50): the
        # speedup is against it, vs_single against the single replay.
        self.assertEqual(resnet1.split()[3:9],
                         ["100.00", "40.00", "0.40", "50.00", "40.00", "0.50"])
        resnet32 = next(l for l in lines if l.startswith("resnet") and l.split()[1] == "32")
        self.assertEqual(resnet32.split()[3:9],
                         ["400.00", "790.00", "1.98", "800.00", "790.00", "2.00"])
        mobile = next(l for l in lines if l.startswith("mobile"))
        self.assertEqual(mobile.split()[4:9], ["-", "-", "-", "-", "-"])  # no PyTorch row
        self.assertIn(f"stacks: geometric-mean speedup {math.sqrt(0.4 * 790 / 400):.3f} over 2 "
                      f"stacks; 1 slower", text)
        # A PyTorch row without back-to-back figures falls back to the single replay.
        torch = STACKS_TORCH.replace("50.0,52.0,40.0", "50.0,52.0,")
        text = self.run_compare("--stacks_ours", self.write("so.csv", STACKS_OURS),
                                "--stacks_torch", self.write("st.csv", torch))
        resnet1 = next(l for l in text.splitlines()
                       if l.startswith("resnet") and l.split()[1] == "1")
        self.assertEqual(resnet1.split()[3:9],
                         ["100.00", "50.00", "0.50", "50.00", "-", "0.50"])
        self.assertIn("no residual add", text)

    def test_calls_per_graph_of_both_sides_are_printed_and_a_mismatch_warned(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            text = self.run_compare(*self.layer_args())
        self.assertIn("calls per graph: convserve 10, pytorch 10", text)
        self.assertNotIn("WARNING", text)
        self.assertEqual(err.getvalue(), "")
        torch = TORCH.replace("# calls_per_graph: 10", "# calls_per_graph: 1")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            text = self.run_compare(*self.layer_args(torch_text=torch))
        self.assertIn("calls per graph: convserve 10, pytorch 1", text)
        self.assertIn("WARNING: the two sides captured different numbers of calls per graph "
                      "(convserve 10, pytorch 1)", text)
        self.assertIn("WARNING", err.getvalue())
        # An older CSV without the line held one call a graph: warned against
        # ten, not against one.
        with contextlib.redirect_stderr(io.StringIO()):
            text = self.run_compare(*self.layer_args(torch_text=TORCH_OLD))
        self.assertIn("calls per graph: convserve 10, pytorch 1 (not recorded)", text)
        self.assertIn("WARNING", text)
        ours_one = OURS.replace("# calls_per_graph: 10", "# calls_per_graph: 1")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            text = self.run_compare(*self.layer_args(torch_text=TORCH_OLD, ours_text=ours_one))
        self.assertIn("calls per graph: convserve 1, pytorch 1 (not recorded)", text)
        self.assertNotIn("WARNING", text)
        self.assertEqual(err.getvalue(), "")

    def test_flags_must_come_in_pairs(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                bench_compare.main(["--ours", "x.csv"])
            with self.assertRaises(SystemExit):
                bench_compare.main([])


if __name__ == "__main__":
    unittest.main()
