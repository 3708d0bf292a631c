#!/usr/bin/env python3
"""scripts/thread_cpu.sh against a child process with named threads: two
that spin (spin1, spin2) or one that naps 10 ms at a time (nap1), and one
that sleeps (idle1). The numbered names must sum into one row each, the
spinners must show CPU and the sleeper none, the napper about 100 sleeps a
second and the sleeper none, the total must be the rows' sum, REQUESTS must
add per-request columns, and a missing process must be an error."""
import os
import re
import subprocess
import sys
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "thread_cpu.sh")

CHILD = r"""
import ctypes, sys, threading, time
SPIN = sys.argv[1] == "spin"
libc = ctypes.CDLL(None)
def named(name, body):
    def run():
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's name
        body()
    threading.Thread(target=run, daemon=True).start()
def spin():
    while True:
        pass
if SPIN:
    named("spin1", spin)
    named("spin2", spin)
named("idle1", lambda: time.sleep(3600))
def nap():
    while True:
        time.sleep(0.01)
if not SPIN:  # the spinners' fight for the interpreter lock would add sleeps
    named("nap1", nap)
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
        self.child = None

    def start_child(self, spin):
        self.child = subprocess.Popen([sys.executable, "-c", CHILD, "spin" if spin else "nap"],
                                      stdout=subprocess.PIPE, text=True)
        self.assertEqual(self.child.stdout.readline().strip(), "ready")

    def tearDown(self):
        if self.child is not None:
            self.child.kill()
            self.child.wait()
            self.child.stdout.close()

    def run_script(self, *args, env=None):
        return subprocess.run(["bash", SCRIPT, str(self.child.pid), *args], capture_output=True,
                              text=True, env=env, timeout=30)

    def test_sums_cpu_by_name(self):
        self.start_child(spin=True)
        result = self.run_script("1")
        self.assertEqual(result.returncode, 0, result.stderr)
        header = result.stdout.splitlines()[0].split()
        self.assertEqual(header, ["thread", "threads", "cores", "sleeps/s"])
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

    def test_counts_sleeps(self):
        self.start_child(spin=False)
        result = self.run_script("2")
        self.assertEqual(result.returncode, 0, result.stderr)
        table = rows(result.stdout)
        # 10 ms naps: at most 100 a second, fewer when the machine is busy.
        self.assertGreater(table["nap"][2], 30, result.stdout)
        self.assertLess(table["nap"][2], 105, result.stdout)
        self.assertEqual(table["idle"][2], 0, result.stdout)
        # The total row has no thread count: its sleeps are its second number.
        parts = sum(v[2] for k, v in table.items() if k != "total")
        self.assertAlmostEqual(table["total"][1], parts, delta=1 * len(table))

    def test_per_request_columns(self):
        self.start_child(spin=True)
        env = dict(os.environ, REQUESTS="1000")
        result = self.run_script("1", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[0].split()[-2:],
                         ["us/request", "sleeps/request"])
        table = rows(result.stdout)
        cores, per_request = table["spin"][1], table["spin"][3]
        # Rates are over the measured interval, which the script names on
        # stderr (the asked 1 s plus a snapshot's time).
        interval = float(re.search(r"rates over ([0-9.]+) s", result.stderr).group(1))
        self.assertGreaterEqual(interval, 1.0)
        self.assertLess(interval, 5.0)
        # cores x interval / 1000 requests, in microseconds (the cores column is rounded)
        self.assertAlmostEqual(per_request, cores * interval * 1e6 / 1000,
                               delta=0.006 * interval * 1e6 / 1000)
        sleeps, sleeps_per_request = table["total"][1], table["total"][3]
        self.assertAlmostEqual(sleeps_per_request, sleeps * interval / 1000,
                               delta=0.5 * interval / 1000 + 0.005)

    def test_missing_process(self):
        result = subprocess.run(["bash", SCRIPT, "999999999", "1"], capture_output=True,
                                text=True, timeout=30)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no process 999999999", result.stderr)


if __name__ == "__main__":
    unittest.main()
