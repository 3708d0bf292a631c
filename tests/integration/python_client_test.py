#!/usr/bin/python3
"""An independent client for convserve: Debian's python3-grpcio and
python3-protobuf, with stubs generated at test time from proto/.

Starts convserve-server (CPU backend) on a free loopback port, lets the C++
client (convserve-load) load the example graph and run one inference, then
calls ServerLive, ServerReady, ModelMetadata and ModelInfer from Python and
checks that the output bytes are identical to the C++ client's. Only the
standard library, grpc and google.protobuf are used.

  python_client_test.py --proto_dir PROTO --server SERVER --load LOAD \
      --graph GRAPH.textproto --work_dir DIR

Prints one line per check and, last, "python_client_test: P passed, F failed";
exits non-zero when any check failed.
"""

import argparse
import importlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test_util"))
from server_process import Checks, Fatal, clean_env, die_with_parent, free_port  # noqa: E402

MODEL = "resnet_block"  # the name in deploy/examples/resnet_block.textproto
INPUT_SHAPE = [2, 3, 20, 24]  # N, C, H, W; the graph is NCHW
WEIGHT_SEED = 1
RPC_TIMEOUT_S = 30
READY_TIMEOUT_S = 20
LOAD_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30

PROTO_FILES = ["inference/model_config.proto", "inference/grpc_predict_v2.proto",
               "convserve/v1/convserve.proto"]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def first_difference(a, b):
    """A readable description of where two FP32 byte strings differ."""
    if len(a) != len(b):
        return "sizes differ: %d vs %d bytes" % (len(a), len(b))
    for i in range(0, len(a), 4):
        if a[i:i + 4] != b[i:i + 4]:
            x = struct.unpack("<f", a[i:i + 4])[0] if len(a[i:i + 4]) == 4 else None
            y = struct.unpack("<f", b[i:i + 4])[0] if len(b[i:i + 4]) == 4 else None
            return "first difference at float %d: %r vs %r" % (i // 4, x, y)
    return "identical"


def tail(path, lines=30):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


class Test:
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.work_dir)
        self.gen = os.path.join(self.work, "gen")
        self.env = clean_env()
        self.checks = Checks()
        self.server = None
        self.server_log = os.path.join(self.work, "server.log")
        self.port = None
        self.channel = None
        self.pb = None  # inference.grpc_predict_v2_pb2
        self.stub = None  # GRPCInferenceService stub
        self.cs_pb = None  # convserve.v1.convserve_pb2
        self.cs_stub = None  # ConvServe stub
        self.expected_shape = None
        self.input_name = None
        self.output_name = None

    # ---- setup -------------------------------------------------------------

    def generate_stubs(self):
        protoc = shutil.which("protoc") or "/usr/bin/protoc"
        plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
        for tool in (protoc, plugin):
            if not os.access(tool, os.X_OK):
                raise Fatal("%s not found (Debian packages protobuf-compiler and "
                            "protobuf-compiler-grpc)" % tool)
        os.makedirs(self.gen)
        cmd = [protoc, "-I" + self.args.proto_dir, "--python_out=" + self.gen,
               "--grpc_python_out=" + self.gen,
               "--plugin=protoc-gen-grpc_python=" + plugin] + PROTO_FILES
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=60, env=self.env)
        if done.returncode != 0:
            raise Fatal("protoc failed (%d): %s" % (done.returncode,
                                                   done.stdout.decode(errors="replace")))
        # The generated modules import each other by proto path
        # ("from inference import grpc_predict_v2_pb2"): put the output dir
        # first on sys.path; the folders import as namespace packages.
        sys.path.insert(0, self.gen)
        importlib.invalidate_caches()
        self.pb = importlib.import_module("inference.grpc_predict_v2_pb2")
        pb_grpc = importlib.import_module("inference.grpc_predict_v2_pb2_grpc")
        self.cs_pb = importlib.import_module("convserve.v1.convserve_pb2")
        cs_grpc = importlib.import_module("convserve.v1.convserve_pb2_grpc")
        for module in (self.pb, self.cs_pb):
            if not os.path.abspath(module.__file__).startswith(self.gen):
                raise Fatal("%s was imported from %s, not from the generated stubs"
                            % (module.__name__, module.__file__))
        import grpc  # Debian's python3-grpcio
        self.grpc = grpc
        self.pb_grpc = pb_grpc
        self.cs_grpc = cs_grpc
        return "protoc %s -> %s (grpcio %s)" % (" ".join(PROTO_FILES), self.gen,
                                               grpc.__version__)

    def start_server_once(self):
        self.port = free_port()
        log = open(self.server_log, "ab")
        log.write(("---- starting on port %d\n" % self.port).encode())
        log.flush()
        try:
            self.server = subprocess.Popen(
                # No /metrics: its default port is shared by every server on
                # the machine (a concurrent test's would make this one exit).
                die_with_parent([self.args.server, "--listen=127.0.0.1:%d" % self.port,
                                 "--backend=cpu", "--metrics_listen="]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env)
        finally:
            log.close()
        self.channel = self.grpc.insecure_channel(
            "127.0.0.1:%d" % self.port,
            # Short reconnect backoff: the first attempts are refused while
            # the server starts, and the default backoff would add seconds.
            options=[("grpc.enable_http_proxy", 0),
                     ("grpc.initial_reconnect_backoff_ms", 50),
                     ("grpc.min_reconnect_backoff_ms", 50),
                     ("grpc.max_reconnect_backoff_ms", 250)])
        self.stub = self.pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.cs_stub = self.cs_grpc.ConvServeStub(self.channel)
        deadline = time.monotonic() + READY_TIMEOUT_S
        last_error = None
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                return False, "server exited with %d before it was live" % self.server.returncode
            try:
                response = self.stub.ServerLive(self.pb.ServerLiveRequest(), timeout=1,
                                                wait_for_ready=True)
                assert response.live is True, "ServerLive answered live=%r" % response.live
                return True, None
            except self.grpc.RpcError as e:
                last_error = "%s: %s" % (e.code(), e.details())
                time.sleep(0.1)
        return False, "not live within %ds; last error: %s" % (READY_TIMEOUT_S, last_error)

    def start_server(self):
        # The port is picked before the server binds it; if another process
        # takes it meanwhile the server exits, and we try another port.
        for _ in range(3):
            live, why = self.start_server_once()
            if live:
                return "pid %d on 127.0.0.1:%d" % (self.server.pid, self.port)
            self.close_channel()
            still_running = self.server.poll() is None
            self.stop_server_quietly()
            self.server = None  # reaped: nothing left to stop
            if still_running:
                raise Fatal("%s\n%s" % (why, tail(self.server_log)))
            print("  (server on port %d: %s; retrying)" % (self.port, why), flush=True)
        raise Fatal("server did not start (3 tries)\n%s" % tail(self.server_log))

    def close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def stop_server_quietly(self):
        if self.server is not None and self.server.poll() is None:
            self.server.kill()
            self.server.wait(timeout=STOP_TIMEOUT_S)

    def stop_server(self):
        self.close_channel()
        if self.server is None:
            raise Fatal("no server was started")
        if self.server.poll() is not None:
            raise AssertionError("server already exited with %d\n%s"
                                 % (self.server.returncode, tail(self.server_log)))
        self.server.send_signal(signal.SIGTERM)
        try:
            rc = self.server.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait(timeout=STOP_TIMEOUT_S)
            raise AssertionError("server did not exit within %ds of SIGTERM; killed"
                                 % STOP_TIMEOUT_S)
        assert rc == 0, "server exited with %d after SIGTERM\n%s" % (rc, tail(self.server_log))
        return "exit status 0 after SIGTERM"

    # ---- the C++ client ----------------------------------------------------

    def run_load(self, tag, protocol, input_seed):
        """Runs convserve-load; returns (input bytes, output bytes, printed
        output shape, printed fnv1a64)."""
        in_path = os.path.join(self.work, "in_%s.bin" % tag)
        out_path = os.path.join(self.work, "out_cpp_%s.bin" % tag)
        cmd = [self.args.load, "--server=127.0.0.1:%d" % self.port,
               "--graph_file=" + self.args.graph, "--seed=%d" % WEIGHT_SEED,
               "--input_shape=" + ",".join(str(d) for d in INPUT_SHAPE),
               "--input_seed=%d" % input_seed, "--save_input=" + in_path,
               "--save_output=" + out_path, "--protocol=" + protocol]
        done = subprocess.run(die_with_parent(cmd), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=LOAD_TIMEOUT_S, env=self.env)
        text = done.stdout.decode(errors="replace")
        with open(os.path.join(self.work, "load_%s.log" % tag), "w") as f:
            f.write(" ".join(cmd) + "\n" + text)
        assert done.returncode == 0, "convserve-load exited with %d:\n%s" % (done.returncode, text)
        m = re.search(r"^output \[([0-9, ]*)\] FLOAT32: .*fnv1a64=([0-9a-f]{16})", text, re.M)
        assert m, "no output summary line in convserve-load's output:\n" + text
        shape = [int(d) for d in m.group(1).split(",")]
        data_in, data_out = read_bytes(in_path), read_bytes(out_path)
        n_in = 1
        for d in INPUT_SHAPE:
            n_in *= d
        assert len(data_in) == 4 * n_in, "%s: %d bytes, want %d" % (in_path, len(data_in),
                                                                    4 * n_in)
        assert shape == self.expected_shape, ("C++ client got output shape %s, want %s"
                                              % (shape, self.expected_shape))
        assert len(data_out) == 4 * self.expected_count(), (
            "%s: %d bytes, want %d" % (out_path, len(data_out), 4 * self.expected_count()))
        assert fnv1a64(data_out) == int(m.group(2), 16), "saved output differs from the printed"
        return data_in, data_out

    # ---- expectations computed from the graph file ---------------------------

    def expected_output_shape(self):
        """Parses the graph file with the generated convserve.v1 module and
        computes the output shape of INPUT_SHAPE by the conv arithmetic."""
        from google.protobuf import text_format
        graph = self.cs_pb.GraphDef()
        with open(self.args.graph) as f:
            text_format.Parse(f.read(), graph)
        assert graph.name == MODEL, "graph file names %r, want %r" % (graph.name, MODEL)
        assert graph.data_type == self.cs_pb.FLOAT32 and graph.layout == self.cs_pb.NCHW
        assert graph.input_channels == INPUT_SHAPE[1]
        spatial = list(INPUT_SHAPE[2:])
        channels = graph.input_channels
        for layer in graph.layers:
            rank = len(spatial)
            k = list(layer.kernel_size)
            s = list(layer.stride) or [1] * rank
            dl = list(layer.dilation) or [1] * rank
            pb = list(layer.pad_before) or [0] * rank
            pa = list(layer.pad_after) or [0] * rank
            spatial = [(spatial[i] + pb[i] + pa[i] - (dl[i] * (k[i] - 1) + 1)) // s[i] + 1
                       for i in range(rank)]
            channels = layer.out_channels
        self.expected_shape = [INPUT_SHAPE[0], channels] + spatial
        # The last layer's activation bounds the output (ReLU6 in the example).
        last = graph.layers[-1].activation
        self.output_range = (None, None)
        if last.kind == self.cs_pb.Activation.RELU and last.negative_slope == 0:
            self.output_range = (0.0, last.upper_clip if last.HasField("upper_clip") else None)
        return "%s -> %s" % (INPUT_SHAPE, self.expected_shape)

    def expected_count(self):
        n = 1
        for d in self.expected_shape:
            n *= d
        return n

    # ---- the checks ----------------------------------------------------------

    def check_server_ready(self):
        live = self.stub.ServerLive(self.pb.ServerLiveRequest(), timeout=RPC_TIMEOUT_S)
        assert live.live is True, "ServerLive: live=%r" % live.live
        ready = self.stub.ServerReady(self.pb.ServerReadyRequest(), timeout=RPC_TIMEOUT_S)
        assert ready.ready is True, "ServerReady: ready=%r" % ready.ready
        return "live=True ready=True"

    def check_cpp_convserve(self):
        self.in1, self.out1 = self.run_load("convserve", "convserve", 11)
        # The C++ client registered the graph; the admin API (generated
        # convserve.v1 stub) must see it.
        info = self.cs_stub.GetGraph(self.cs_pb.GetGraphRequest(graph=MODEL),
                                     timeout=RPC_TIMEOUT_S).graph
        assert info.definition.name == MODEL and len(info.id) > 0, str(info)
        return "convserve.v1.Infer: %d input bytes, %d output bytes; graph id %s" % (
            len(self.in1), len(self.out1), info.id)

    def check_model_metadata(self):
        md = self.stub.ModelMetadata(self.pb.ModelMetadataRequest(name=MODEL),
                                     timeout=RPC_TIMEOUT_S)
        assert md.name == MODEL, "name %r" % md.name
        assert len(md.inputs) == 1, "inputs: %s" % md.inputs
        assert len(md.outputs) == 1, "outputs: %s" % md.outputs
        inp, out = md.inputs[0], md.outputs[0]
        assert inp.datatype == "FP32", "input datatype %r" % inp.datatype
        assert list(inp.shape) == [-1, 3, -1, -1], "input shape %s" % list(inp.shape)
        assert inp.name, "input has no name"
        assert out.datatype == "FP32", "output datatype %r" % out.datatype
        assert out.name, "output has no name"
        assert len(out.shape) == 4, "output shape %s" % list(out.shape)
        for got, want in zip(out.shape, [-1, self.expected_shape[1], -1, -1]):
            assert got == want or got == -1, "output shape %s, want [-1, %d, -1, -1]" % (
                list(out.shape), self.expected_shape[1])
        self.input_name, self.output_name = inp.name, out.name
        self.metadata_output_shape = list(out.shape)
        return "input %s FP32 %s, output %s FP32 %s" % (inp.name, list(inp.shape), out.name,
                                                        list(out.shape))

    def model_infer(self, data=None, floats=None, shape=None):
        request = self.pb.ModelInferRequest(model_name=MODEL, id="python-client")
        tensor = request.inputs.add(name=self.input_name or "input", datatype="FP32",
                                    shape=shape or INPUT_SHAPE)
        if floats is not None:
            tensor.contents.fp32_contents.extend(floats)
        else:
            request.raw_input_contents.append(data)
        return self.stub.ModelInfer(request, timeout=RPC_TIMEOUT_S)

    def output_bytes(self, response):
        """Checks a ModelInferResponse's form; returns its output bytes."""
        assert response.model_name == MODEL, "model_name %r" % response.model_name
        assert len(response.outputs) == 1, "outputs: %s" % response.outputs
        out = response.outputs[0]
        assert out.name == self.output_name, "output name %r, metadata said %r" % (
            out.name, self.output_name)
        assert out.datatype == "FP32", "datatype %r" % out.datatype
        shape = list(out.shape)
        assert shape == self.expected_shape, "shape %s, want %s" % (shape, self.expected_shape)
        for got, meta in zip(shape, self.metadata_output_shape):
            assert meta == -1 or got == meta, "shape %s does not fit metadata %s" % (
                shape, self.metadata_output_shape)
        assert len(response.raw_output_contents) == 1, (
            "%d raw_output_contents" % len(response.raw_output_contents))
        data = response.raw_output_contents[0]
        assert len(data) == 4 * self.expected_count(), "%d bytes for shape %s" % (len(data),
                                                                                 shape)
        return data

    def check_infer_raw(self):
        got = self.output_bytes(self.model_infer(data=self.in1))
        assert got == self.out1, ("output differs from the C++ client's: "
                                  + first_difference(got, self.out1))
        values = struct.unpack("<%df" % (len(got) // 4), got)
        lo, hi = self.output_range
        assert all(v == v and abs(v) != float("inf") for v in values), "non-finite output"
        if lo is not None:
            assert min(values) >= lo, "min %r below %r" % (min(values), lo)
        if hi is not None:
            assert max(values) <= hi, "max %r above %r" % (max(values), hi)
        assert any(v != 0 for v in values), "output is all zeros"
        return "%d bytes identical to convserve-load (convserve.v1), fnv1a64=%016x" % (
            len(got), fnv1a64(got))

    def check_cpp_kserve_and_python(self):
        in2, out2 = self.run_load("kserve", "kserve", 12)
        assert in2 != self.in1, "input seeds 11 and 12 gave the same input"
        assert out2 != self.out1, "different inputs gave the same output"
        got = self.output_bytes(self.model_infer(data=in2))
        assert got == out2, ("output differs from the C++ client's: "
                             + first_difference(got, out2))
        return "%d bytes identical to convserve-load --protocol=kserve (input seed 12)" % len(got)

    def check_infer_fp32_contents(self):
        floats = struct.unpack("<%df" % (len(self.in1) // 4), self.in1)
        got = self.output_bytes(self.model_infer(floats=floats))
        assert got == self.out1, ("fp32_contents output differs from the raw one: "
                                  + first_difference(got, self.out1))
        return "%d floats via contents.fp32_contents -> identical bytes" % len(floats)

    def check_unknown_model(self):
        request = self.pb.ModelInferRequest(model_name="no_such_model_xyz")
        request.inputs.add(name=self.input_name or "input", datatype="FP32", shape=INPUT_SHAPE)
        count = 1
        for d in INPUT_SHAPE:
            count *= d
        request.raw_input_contents.append(bytes(4 * count))
        try:
            self.stub.ModelInfer(request, timeout=RPC_TIMEOUT_S)
        except self.grpc.RpcError as e:
            assert e.code() == self.grpc.StatusCode.NOT_FOUND, "got %s: %s" % (e.code(),
                                                                               e.details())
            assert e.details(), "NOT_FOUND without a message"
            return "NOT_FOUND: %s" % e.details()
        raise AssertionError("ModelInfer of an unknown model succeeded")

    # ---- driver --------------------------------------------------------------

    def main(self):
        start = time.monotonic()
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        c = self.checks
        try:
            ok, _ = c.run("generate stubs from proto/ with protoc + grpc_python_plugin",
                          self.generate_stubs)
            ok = ok and c.run("expected output shape from the graph file",
                              self.expected_output_shape)[0]
            ok = ok and c.run("start server, ServerLive polled until live",
                              self.start_server)[0]
            if ok:
                c.run("ServerLive and ServerReady", self.check_server_ready)
                ok = c.run("C++ client (convserve protocol) loads graph and infers",
                           self.check_cpp_convserve)[0]
                ok = c.run("ModelMetadata", self.check_model_metadata)[0] and ok
                if ok:
                    c.run("ModelInfer raw_input_contents == C++ client bytes",
                          self.check_infer_raw)
                    c.run("C++ client (kserve protocol, other input) == Python bytes",
                          self.check_cpp_kserve_and_python)
                    c.run("ModelInfer contents.fp32_contents == C++ client bytes",
                          self.check_infer_fp32_contents)
                c.run("ModelInfer unknown model -> NOT_FOUND", self.check_unknown_model)
        finally:
            if self.server is not None:
                c.run("server stops cleanly on SIGTERM", self.stop_server)
        if c.failed:
            print("server log (%s), last lines:\n%s" % (self.server_log, tail(self.server_log)))
        print("runtime %.1fs" % (time.monotonic() - start))
        print("python_client_test: %d passed, %d failed" % (c.passed, c.failed), flush=True)
        return 1 if c.failed or c.passed == 0 else 0


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--server", required=True, help="convserve-server binary")
    parser.add_argument("--load", required=True, help="convserve-load binary")
    parser.add_argument("--graph", required=True, help="graph text proto")
    parser.add_argument("--work_dir", required=True)
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(Test(parse_args()).main())
