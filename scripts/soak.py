#!/usr/bin/env python3
"""Soak test: convserve-server under convserve-load at a fixed concurrency for
a long time, with graph churn beside it (another graph loaded, sent a few
requests and unloaded, over and over), sampling the server's resident memory
and threads every few seconds (docs/testing.md).

  scripts/soak.py --bin build --duration 600          the 10-minute soak
  scripts/soak.py --bin build --duration 120 ...      CI's 2-minute form

It prints a sample line per interval and a summary: requests OK, errors by
status code (main load and churn apart), churn cycles, RSS at the end of the
warm-up and at the end, its growth, and threads. Writes samples.csv and
soak.json into --out. Exit status 1 when any request failed with a code not
in --expected_codes (in the load or ending a churn cycle), the server did
not stop cleanly, or RSS grew more than --max_rss_growth_percent after the
warm-up.

The server runs with MALLOC_ARENA_MAX=2 unless the environment sets it:
glibc's per-thread malloc arenas (up to 8 per core) keep freed memory of
gRPC's many threads apart and make RSS climb for many minutes though nothing
leaks; capped, RSS settles after the warm-up.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "test_util"))
import server_process  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# The graph loaded and unloaded by the churn: small, so each cycle is quick.
CHURN_GRAPH = """# scripts/soak.py's churn graph: loaded, used and unloaded over and over.
name: "soak_churn"
data_type: FLOAT32
layout: NCHW
input_channels: 3
layers {
  out_channels: 8
  kernel_size: [3, 3]
  activation { kind: RELU }
}
"""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True,
                   help="folder holding convserve-server and convserve-load")
    p.add_argument("--out", default=None, help="results folder (default: <bin>/soak)")
    p.add_argument("--duration", type=float, default=600, help="seconds of load")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds before the RSS baseline (default: a sixth of --duration)")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--interval", type=float, default=10, help="seconds between samples")
    p.add_argument("--graph", default=os.path.join(ROOT, "tests", "bench", "conv64_nhwc.textproto"),
                   help="graph file of the main load")
    p.add_argument("--input_shape", default="1,64,8,8")
    p.add_argument("--protocol", default="kserve", choices=["kserve", "convserve"])
    p.add_argument("--churn_requests", type=int, default=4,
                   help="requests each churn cycle sends before it unloads")
    p.add_argument("--server_flags", default="--request_threads=2 --max_queued_requests=512",
                   help="extra convserve-server flags, space-separated")
    p.add_argument("--expected_codes", default="",
                   help="comma-separated status codes that count as expected errors")
    p.add_argument("--max_rss_growth_percent", type=float, default=5.0)
    return p.parse_args()


def read_status(pid):
    """(RSS in KiB, threads) of a process, from /proc."""
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def is_live(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True, None
    except OSError as e:
        return False, str(e)


def add_codes(into, codes):
    for code, count in codes.items():
        into[code] = into.get(code, 0) + count


class Churn(threading.Thread):
    """Loads the churn graph, sends it a few requests and unloads it, in a
    loop, each cycle one convserve-load run; counts cycles, requests answered
    OK, and failed cycles by the status code that ended them."""

    def __init__(self, args, load, port, out, env):
        super().__init__(daemon=True)
        self.args, self.load, self.port, self.out, self.env = args, load, port, out, env
        self.stop = threading.Event()
        self.cycles = 0
        self.failed_cycles = 0
        self.ok = 0
        self.errors_by_code = {}
        self.first_failure = None

    def run(self):
        graph = os.path.join(self.out, "soak_churn.textproto")
        with open(graph, "w") as f:
            f.write(CHURN_GRAPH)
        while not self.stop.is_set():
            cmd = [self.load, "--server=127.0.0.1:%d" % self.port, "--graph_file=" + graph,
                   "--input_shape=1,3,12,12", "--requests=%d" % self.args.churn_requests,
                   "--unload", "--protocol=" + self.args.protocol, "--timeout=60s"]
            run = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env=self.env)
            output = run.stdout.decode(errors="replace")
            self.cycles += 1
            sent = re.search(r"^(\d+) requests \(", output, re.M)
            if run.returncode == 0 and sent and "unloaded 'soak_churn'" in output:
                self.ok += int(sent.group(1))
                continue
            # "convserve-load: <what failed>: <CODE>: <message>"
            failed = re.search(r"^convserve-load: [^:]*: ([A-Z_]+):", output, re.M)
            code = failed.group(1) if failed else "exit %d" % run.returncode
            self.errors_by_code[code] = self.errors_by_code.get(code, 0) + 1
            self.failed_cycles += 1
            if self.first_failure is None:
                self.first_failure = output[-2000:]


def main():
    args = parse_args()
    bin_dir = os.path.abspath(args.bin)
    server_bin = os.path.join(bin_dir, "convserve-server")
    load_bin = os.path.join(bin_dir, "convserve-load")
    out = os.path.abspath(args.out or os.path.join(bin_dir, "soak"))
    os.makedirs(out, exist_ok=True)
    warmup = args.warmup if args.warmup is not None else args.duration / 6
    expected = {c for c in args.expected_codes.split(",") if c}

    env = server_process.clean_env()
    server_env = dict(env)
    server_env.setdefault("MALLOC_ARENA_MAX", "2")
    flags = ["--metrics_listen=127.0.0.1:0", "--log_level=warn", "--graph_management=open"]
    flags += args.server_flags.split()
    server = server_process.ServerProcess(server_bin, flags, os.path.join(out, "server.log"),
                                          server_env, ready_timeout_s=60)
    print("soak: server %s, MALLOC_ARENA_MAX=%s" % (server.start(is_live),
                                                    server_env["MALLOC_ARENA_MAX"]), flush=True)
    pid, port = server.process.pid, server.port

    # Windows of --interval until --duration: the level never settles early
    # (every window must agree).
    windows = max(1, int(round(args.duration / args.interval)))
    main_report = os.path.join(out, "load.json")
    main_cmd = [load_bin, "--server=127.0.0.1:%d" % port, "--graph_file=" + args.graph,
                "--input_shape=" + args.input_shape, "--protocol=" + args.protocol,
                "--concurrency_range=%d" % args.concurrency, "--warmup=0s",
                "--window=%ds" % args.interval, "--max_windows=%d" % windows,
                "--stable_windows=%d" % windows, "--json=" + main_report, "--timeout=60s",
                "--max_error_ratio=1", "--wait_for_server=30"]
    load_log = open(os.path.join(out, "load.log"), "w")
    start = time.monotonic()
    load = subprocess.Popen(main_cmd, stdin=subprocess.DEVNULL, stdout=load_log,
                            stderr=subprocess.STDOUT, env=env)
    churn = Churn(args, load_bin, port, out, env)
    churn.start()

    samples = []
    baseline = None
    with open(os.path.join(out, "samples.csv"), "w") as csv:
        csv.write("seconds,rss_kib,threads,churn_cycles\n")
        next_sample = start
        while load.poll() is None:
            now = time.monotonic()
            if now >= next_sample:
                if not server.running():
                    break
                rss, threads = read_status(pid)
                t = now - start
                samples.append((t, rss, threads))
                if baseline is None and t >= warmup:
                    baseline = (t, rss)
                csv.write("%.1f,%d,%d,%d\n" % (t, rss, threads, churn.cycles))
                csv.flush()
                print("soak: %6.1fs rss %7.1f MiB threads %3d churn cycles %d"
                      % (t, rss / 1024, threads, churn.cycles), flush=True)
                next_sample += args.interval
            time.sleep(0.2)
    load.wait()
    load_log.close()
    churn.stop.set()
    churn.join()
    end_rss, end_threads = read_status(pid) if server.running() else (0, 0)
    elapsed = time.monotonic() - start

    problems = []
    try:
        stopped = server.stop()
    except (AssertionError, server_process.Fatal) as e:
        stopped = None
        problems.append("server: %s" % e)
    try:
        with open(main_report) as f:
            totals = json.load(f)["totals"]
    except (OSError, ValueError, KeyError) as e:
        totals = {"ok": 0, "errors": 0, "errors_by_code": {}}
        problems.append("convserve-load wrote no report (%s); exit %s; see %s"
                        % (e, load.returncode, os.path.join(out, "load.log")))
    errors = dict(totals["errors_by_code"])
    unexpected = {c: n for c, n in errors.items() if c not in expected}
    unexpected_churn = {c: n for c, n in churn.errors_by_code.items() if c not in expected}
    if unexpected:
        problems.append("unexpected errors under load: %s" % unexpected)
    if unexpected_churn:
        problems.append("churn cycles failed: %s; the first:\n%s"
                        % (unexpected_churn, churn.first_failure))
    if baseline is None and samples:
        baseline = (samples[-1][0], samples[-1][1])
    growth = 100.0 * (end_rss - baseline[1]) / baseline[1] if baseline and baseline[1] else 0.0
    if growth > args.max_rss_growth_percent:
        problems.append("RSS grew %.1f%% after the warm-up (limit %.1f%%)"
                        % (growth, args.max_rss_growth_percent))
    threads = [s[2] for s in samples] or [0]

    summary = {
        "seconds": round(elapsed, 1), "concurrency": args.concurrency,
        "protocol": args.protocol, "malloc_arena_max": server_env["MALLOC_ARENA_MAX"],
        "ok": totals["ok"], "errors_by_code": errors, "expected_codes": sorted(expected),
        "churn": {"cycles": churn.cycles, "failed_cycles": churn.failed_cycles, "ok": churn.ok,
                  "errors_by_code": churn.errors_by_code},
        "rss_kib": {"first": samples[0][1] if samples else 0,
                    "after_warmup": baseline[1] if baseline else 0,
                    "after_warmup_at_s": round(baseline[0], 1) if baseline else 0,
                    "end": end_rss, "growth_percent": round(growth, 2)},
        "threads": {"min": min(threads), "max": max(threads), "end": end_threads},
        "server_stop": stopped, "problems": problems,
    }
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("soak: %.0fs at concurrency %d (%s): %d OK, errors %s; churn %d cycles, %d OK, errors %s"
          % (elapsed, args.concurrency, args.protocol, totals["ok"], errors or "none",
             churn.cycles, churn.ok, churn.errors_by_code or "none"))
    print("soak: RSS %.1f MiB at %.0fs (after warm-up) -> %.1f MiB at the end: %+.2f%%; "
          "threads %d..%d, %d at the end; server: %s"
          % (summary["rss_kib"]["after_warmup"] / 1024, summary["rss_kib"]["after_warmup_at_s"],
             end_rss / 1024, growth, min(threads), max(threads), end_threads, stopped))
    for problem in problems:
        print("soak: FAIL: %s" % problem)
    print("soak: %s" % ("FAIL" if problems else "PASS"), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
