#!/usr/bin/env python3
"""scripts/bench_gpu_time.sh with stand-ins for the GPU programs: a fake
bundle (conv_layer_bench prints a CSV; stack_bench is missing) and a fake
python that answers for PyTorch (bench_pytorch.py prints a CSV,
bench_pytorch_stacks.py fails). The driver must compare what it has, report
the missing binary and the failing step with their reasons, and print the
short tables last. OURS_CUDNN's directories (a directory, or PyTorch's
wheel's from a fake nvidia.cudnn package) go to our programs' library path
only, and a choice without libcudnn.so.9 stops the run before anything is
created. Runs without a
GPU or PyTorch."""
import os
import stat
import subprocess
import tarfile
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

OURS = """\
# method: fake
# calls_per_graph: 4
name,batch,dtype,layout,selection,path,engine,ours_ms,ours_graph_ms
resnet50_56_1x1_64_64,1,float16,NHWC,autotune,fused,3,0.00800,0.00400
resnet50_56_3x3_64_64,32,float16,NHWC,autotune,fused,4,0.02500,0.02400
"""

TORCH = """\
# device: NVIDIA H100 80GB HBM3
# calls_per_graph: 4
name,batch,dtype,layout,graph_best_ms,graph_best_variant,graph_conv_relu_ms,graph_cudnn_fused_ms,eager_best_ms,eager_best_variant,eager_conv_relu_ms,eager_cudnn_fused_ms
resnet50_56_1x1_64_64,1,float16,NHWC,0.00400,cudnn_fused,0.00500,0.00400,0.02400,cudnn_fused,0.04000,0.02400
resnet50_56_3x3_64_64,32,float16,NHWC,0.05000,conv_relu,0.05000,0.06000,0.06000,conv_relu,0.06000,0.07000
"""


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


class BenchGpuTimeTest(unittest.TestCase):
    def fake_bundle(self, tmp):
        """A bundle with a conv_layer_bench (no stack_bench) that records its
        arguments and LD_LIBRARY_PATH and prints a CSV, and a python whose
        bench_pytorch.py does the same and whose bench_pytorch_stacks.py
        fails; anything else runs in the real python without its site
        packages, on tmp/site only (where a test may put a fake PyTorch
        nvidia.cudnn package). Returns the environment for the driver."""
        os.makedirs(os.path.join(tmp, "site"))
        bundle = os.path.join(tmp, "bundle")
        os.makedirs(os.path.join(bundle, "bin"))
        os.makedirs(os.path.join(bundle, "lib"))
        executable(os.path.join(bundle, "bin", "conv_layer_bench"),
                   f"#!/bin/sh\necho \"$@\" > {tmp}/ours_args\n"
                   f"echo \"$LD_LIBRARY_PATH\" > {tmp}/ours_ld\necho 'fake backend' >&2\n"
                   f"cat <<'EOF'\n{OURS}EOF\n")
        fake_python = os.path.join(tmp, "python")
        executable(fake_python, f"""#!/bin/bash
case "$1" in
  -c) echo ok ;;
  scripts/bench_pytorch.py) echo "$@" > {tmp}/torch_args; echo "$LD_LIBRARY_PATH" > {tmp}/torch_ld
    cat <<'EOF'
{TORCH}EOF
  ;;
  scripts/bench_pytorch_stacks.py) echo "RuntimeError: fake capture failure" >&2; exit 3 ;;
  *) PYTHONPATH={tmp}/site exec /usr/bin/python3 -S "$@" ;;
esac
""")
        return dict(os.environ, BUNDLE=bundle, OUT=os.path.join(tmp, "out"),
                    PYTHON=fake_python, PATH="/usr/bin:/bin")

    @staticmethod
    def run_driver(env):
        return subprocess.run(["bash", "scripts/bench_gpu_time.sh"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    def assert_ours_run_on(self, tmp, choice, dirs):
        """Runs the driver with OURS_CUDNN=choice over the fake bundle of
        `tmp` and checks that our program, and not PyTorch's step, had
        `dirs` on its library path, right after the bundle's lib/."""
        env = dict(self.fake_bundle(tmp), LD_LIBRARY_PATH="/given", PARTS="layers",
                   OURS_CUDNN=choice)
        os.makedirs(dirs[0], exist_ok=True)
        open(os.path.join(dirs[0], "libcudnn.so.9"), "w").close()
        for extra in dirs[1:]:
            os.makedirs(extra, exist_ok=True)
        result = self.run_driver(env)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        joined = ":".join(dirs)
        self.assertIn(f"ours on the cuDNN in {joined} (OURS_CUDNN={choice})", result.stdout)
        with open(os.path.join(tmp, "ours_ld")) as f:
            self.assertEqual(f.read().strip(), f"{env['BUNDLE']}/lib:{joined}:/given")
        with open(os.path.join(tmp, "torch_ld")) as f:
            self.assertNotIn(dirs[0], f.read())

    def test_ours_cudnn_torch_is_pytorchs_wheel(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.assert_ours_run_on(tmp, "torch",
                                    [os.path.join(tmp, "site", "nvidia", "cudnn", "lib"),
                                     os.path.join(tmp, "site", "nvidia", "cu13", "lib")])

    def test_ours_cudnn_directory_is_for_our_programs_only(self):
        with tempfile.TemporaryDirectory() as tmp:
            cudnn = os.path.join(tmp, "cudnn919")
            self.assert_ours_run_on(tmp, cudnn, [cudnn])

    def test_ours_cudnn_without_a_library_stops_before_running(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(self.fake_bundle(tmp), PARTS="layers")
            for choice, named in ((os.path.join(tmp, "empty"), "the directory given"),
                                  ("torch", "PyTorch's nvidia.cudnn package")):
                os.makedirs(os.path.join(tmp, "empty"), exist_ok=True)
                env["OURS_CUDNN"] = choice
                result = self.run_driver(env)
                self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
                self.assertIn(f"OURS_CUDNN={choice}: no libcudnn.so.9", result.stderr)
                self.assertIn(named, result.stderr)
                self.assertIn("nothing was run", result.stderr)
                self.assertFalse(os.path.exists(os.path.join(tmp, "ours_ld")))
                self.assertFalse(os.path.exists(env["OUT"]))

    def test_compares_what_ran_and_reports_what_did_not(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(self.fake_bundle(tmp), CALLS_PER_GRAPH="4")
            bundle, out = env["BUNDLE"], env["OUT"]
            result = self.run_driver(env)
            text = result.stdout
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("conv_layer_bench: ok, 2 rows", text)
            self.assertIn("bench_pytorch: ok, 2 rows", text)
            self.assertIn(f"stack_bench: skipped, {bundle}/bin/stack_bench missing", text)
            self.assertIn("bench_pytorch_stacks: FAILED (exit 3)", text)
            self.assertIn("RuntimeError: fake capture failure", text)
            # Replayed (the headline): 1.0x and 50/24 = 2.083x, geometric mean 1.443,
            # none slower; launched from the host: 0.5x and 2.0x, 1.0, one
            # slower. The table is in the file.
            self.assertIn("vs PyTorch graph replay (headline): geometric-mean speedup 1.443 over "
                          "2 layers; 0 layers slower", text)
            self.assertIn("ours launched from the host per layer (--cuda_graphs=false) vs PyTorch "
                          "graph replay: geometric-mean speedup 1.000 over 2 layers; 1 layers "
                          "slower", text)
            self.assertIn("no stack comparison", text)
            # Both sides capture the same number of calls a graph, and the
            # summary says how many.
            for side in ("ours_args", "torch_args"):
                with open(os.path.join(tmp, side)) as f:
                    self.assertIn("--calls_per_graph=4", f.read().split(), side)
            self.assertIn("calls per graph: convserve 4, pytorch 4", text)
            self.assertNotIn("WARNING", text)
            self.assertTrue(os.path.exists(os.path.join(out, "compare_layers.csv")))
            with open(os.path.join(out, "compare_layers.txt")) as f:
                self.assertIn("resnet50_56_3x3_64_64", f.read())
            # At most eight plain files directly under $OUT (what a device
            # harness returns); the logs are packed in logs.tar.gz.
            files = sorted(os.listdir(out))
            self.assertLessEqual(len(files), 8, files)
            self.assertIn("logs.tar.gz", files)
            with tarfile.open(os.path.join(out, "logs.tar.gz")) as logs:
                self.assertIn("./bench_pytorch_stacks.err", logs.getnames())
            # The step list is the last thing printed.
            self.assertRegex(text.rstrip().splitlines()[-1],
                             r"^bench_pytorch_stacks: FAILED .*/bench_pytorch_stacks.err$")


if __name__ == "__main__":
    unittest.main()
