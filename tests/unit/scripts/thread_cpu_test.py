#!/usr/bin/env python3
"""scripts/thread_cpu.sh against a child process with named threads: two
that spin (spin1, spin2) and one that sleeps (idle1). The numbered names must
sum into one row each, the spinners must show CPU and the sleeper none, the
total must be the rows' sum, REQUESTS must add a per-request column, and a
missing process must be an error."""
import os
import re
import subprocess
import sys
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "thread_cpu.sh")

CHILD = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None)
def named(name, body):
    def run():
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's name
        body()
    threading.Thread(target=run, daemon=True).start()
def spin():
    while True:
        pass
named("spin1", spin)
named("spin2", spin)
named("idle1", lambda: time.sleep(3600))
print("ready", flush=True)
time.sleep(3600)
"""


def rows(text):
    """name -> list of the row's numbers, from the script's table."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        out[parts[0]] = [float(x) for x in parts[1:]]
    return out


class ThreadCpuTest(unittest.TestCase):
    def setUp(self):
        self.child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                                      text=True)
        self.assertEqual(self.child.stdout.readline().strip(), "ready")

    def tearDown(self):
        self.child.kill()
        self.child.wait()

    def run_script(self, *args, env=None):
        return subprocess.run(["bash", SCRIPT, str(self.child.pid), *args], capture_output=True,
                              text=True, env=env, timeout=30)

    def test_sums_cpu_by_name(self):
        result = self.run_script("1")
        self.assertEqual(result.returncode, 0, result.stderr)
        header = result.stdout.splitlines()[0].split()
        self.assertEqual(header, ["thread", "threads", "cores"])
        table = rows(result.stdout)
        self.assertEqual(table["spin"][0], 2, result.stdout)   # spin1 + spin2, one row
        self.assertEqual(table["idle"][0], 1, result.stdout)
        # The two spinners share Python's interpreter lock: about one core
        # between them, less on a busy machine, never none.
        self.assertGreater(table["spin"][1], 0.2, result.stdout)
        self.assertLess(table["idle"][1], 0.05, result.stdout)
        total = table["total"][0]
        parts = sum(v[1] for k, v in table.items() if k != "total")
        self.assertAlmostEqual(total, parts, delta=0.02 * len(table))

    def test_per_request_column(self):
        env = dict(os.environ, REQUESTS="1000")
        result = self.run_script("1", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[0].split()[-1], "us/request")
        table = rows(result.stdout)
        cores, per_request = table["spin"][1], table["spin"][2]
        # cores x 1 s / 1000 requests, in microseconds (the cores column is rounded)
        self.assertAlmostEqual(per_request, cores * 1e6 / 1000, delta=0.006 * 1e6 / 1000)

    def test_missing_process(self):
        result = subprocess.run(["bash", SCRIPT, "999999999", "1"], capture_output=True,
                                text=True, timeout=30)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no process 999999999", result.stderr)


if __name__ == "__main__":
    unittest.main()
