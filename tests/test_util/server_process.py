"""Helpers for Python tests that run convserve-server as a child process:
checks printed one line each, an environment without HTTP proxies, a server
on a free loopback port that dies with the test, and its graceful stop.
Standard library only, so any Python (Debian's or a venv's) can import it.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import traceback


class Fatal(Exception):
    """A failure after which the remaining checks cannot run."""


class Skipped(Exception):
    """Raised by a check that cannot apply here; the message says why."""


class Checks:
    """Runs checks, prints PASS/FAIL/SKIP and a detail per check, and counts."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def run(self, name, fn, *args):
        """Runs fn(*args); a str result is printed after the name. Returns
        (ok, fn's result); a skipped check is neither ok nor failed."""
        start = time.monotonic()
        try:
            result = fn(*args)
        except Skipped as e:
            self.skipped += 1
            print("SKIP %s (%.2fs): %s" % (name, time.monotonic() - start, e), flush=True)
            return False, None
        except Exception as e:  # noqa: BLE001 - every failure is reported
            self.failed += 1
            if callable(getattr(e, "code", None)) and callable(getattr(e, "details", None)):
                what = "RPC failed: %s: %s" % (e.code(), e.details())  # a grpc.RpcError
            else:
                what = "%s: %s" % (type(e).__name__, e)
            print("FAIL %s (%.2fs): %s" % (name, time.monotonic() - start, what), flush=True)
            if not isinstance(e, (AssertionError, Fatal)) and not what.startswith("RPC"):
                traceback.print_exc()
            return False, None
        self.passed += 1
        detail = (": " + result) if isinstance(result, str) and result else ""
        print("PASS %s (%.2fs)%s" % (name, time.monotonic() - start, detail), flush=True)
        return True, result

    def summary(self, test_name):
        """The closing line ctest's log shows; also the exit status."""
        print("%s: %d passed, %d failed, %d skipped" % (test_name, self.passed, self.failed,
                                                       self.skipped), flush=True)
        return 1 if self.failed or self.passed == 0 else 0


def clean_env():
    """The environment for this process's channels and its children, without
    HTTP proxies (gRPC would honour them, even for loopback)."""
    env = dict(os.environ)
    for key in list(env):
        if key.lower() in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
            del env[key]
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def die_with_parent(cmd):
    """`cmd` started so that it gets SIGTERM if this process dies (e.g. killed
    by a ctest timeout), so no server is left behind: through util-linux's
    setpriv, which sets the parent-death signal and execs it, where setpriv
    is installed. Not a preexec_fn: Python code between fork and exec can
    deadlock in a process with gRPC's threads (python_client_test's first
    convserve-load hung there until ctest's 300 s timeout, once, under a
    loaded machine)."""
    setpriv = shutil.which("setpriv")
    return ([setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []) + list(cmd)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, lines=30):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


class ServerProcess:
    """convserve-server on 127.0.0.1 and a free port, its output in `log`."""

    def __init__(self, binary, flags, log, env, ready_timeout_s=20, stop_timeout_s=30):
        self.binary = binary
        self.flags = list(flags)
        self.log = log
        self.env = env
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.process = None
        self.port = None

    def start(self, is_live):
        """Starts the server and polls is_live(port) -> (live, why) until it
        says live. The port is picked before the server binds it; if another
        process takes it meanwhile the server exits, and another port is
        tried. Returns a description."""
        for _ in range(3):
            live, why = self._start_once(is_live)
            if live:
                return "pid %d on 127.0.0.1:%d" % (self.process.pid, self.port)
            still_running = self.process.poll() is None
            self.kill()
            if still_running:
                raise Fatal("%s\n%s" % (why, tail(self.log)))
            print("  (server on port %d: %s; retrying)" % (self.port, why), flush=True)
        raise Fatal("server did not start (3 tries)\n%s" % tail(self.log))

    def _start_once(self, is_live):
        self.port = free_port()
        with open(self.log, "ab") as log:
            log.write(("---- starting on port %d\n" % self.port).encode())
            log.flush()
            self.process = subprocess.Popen(
                die_with_parent([self.binary, "--listen=127.0.0.1:%d" % self.port] +
                                self.flags),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + self.ready_timeout_s
        why = "not polled"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False, "server exited with %d before it was live" % self.process.returncode
            live, why = is_live(self.port)
            if live:
                return True, None
            time.sleep(0.1)
        return False, "not live within %ds; last answer: %s" % (self.ready_timeout_s, why)

    def running(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        if self.running():
            self.process.kill()
            self.process.wait(timeout=self.stop_timeout_s)

    def stop(self):
        """SIGTERM, then the exit status must be 0 within the timeout."""
        if self.process is None:
            raise Fatal("no server was started")
        if self.process.poll() is not None:
            raise AssertionError("server already exited with %d\n%s"
                                 % (self.process.returncode, tail(self.log)))
        self.process.send_signal(signal.SIGTERM)
        try:
            rc = self.process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("server did not exit within %ds of SIGTERM; killed"
                                 % self.stop_timeout_s)
        assert rc == 0, "server exited with %d after SIGTERM\n%s" % (rc, tail(self.log))
        return "exit status 0 after SIGTERM"
