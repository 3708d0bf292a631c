#!/usr/bin/python3
"""NVIDIA's own Triton client (tritonclient[grpc], pinned in scripts/setup.sh)
against convserve-server, as a Triton user would call it.

Starts convserve-server (CPU backend) on a free loopback port; the C++ client
(convserve-load, convserve.v1 protocol) loads three example graphs (float32
NCHW, float16 NHWC, bfloat16 NDHWC), runs one inference on each and saves
input and output. Then, through tritonclient only: server live/ready/metadata
(extensions), model readiness and metadata, inference with raw bytes
(identical to the C++ client's output), inference with input and output in
system shared memory (tritonclient.utils.shared_memory; identical to the raw
answer), region status, error cases (InferenceServerException with the
status), unregistering one region and all, and a bidirectional stream with
several requests in flight and a bad request whose error arrives in the
callback.

  tritonclient_test.py --venv VENV --server SERVER --load LOAD \\
      --examples DIR --work_dir DIR

Runs in the test venv of scripts/setup.sh (VENV): started with another
Python, it re-executes itself with the venv's. Prints one line per call and,
last, "tritonclient_test: P passed, F failed, S skipped"; exits non-zero when
any check failed.
"""

import argparse
import os
import queue
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test_util"))
from server_process import (Checks, ServerProcess, clean_env,  # noqa: E402
                            die_with_parent)
from tritonclient_model_checks import ModelChecks, fnv1a64  # noqa: E402

RPC_TIMEOUT_S = 30
LOAD_TIMEOUT_S = 120
# The whole stream's deadline, so a server that never ends it cannot hang
# stop_stream().
STREAM_TIMEOUT_S = 60
WEIGHT_SEED = 1


class Model:
    """An example graph, the input sent and what the C++ client got back."""

    def __init__(self, name, graph_file, input_shape, datatype, channels_last, input_seed):
        self.name = name
        self.graph_file = graph_file
        self.input_shape = input_shape  # logical N, C, spatial...
        self.datatype = datatype  # KServe: FP32, FP16, BF16
        self.channels_last = channels_last
        self.input_seed = input_seed
        self.input = None  # bytes
        self.output = None  # bytes, from convserve-load (convserve.v1 Infer)
        self.checksum = None  # fnv1a64 of output, as convserve-load printed it
        self.graph_id = None
        self.output_shape = None  # logical

    def byte_order(self, logical):
        if not self.channels_last:
            return list(logical)
        return [logical[0]] + list(logical[2:]) + [logical[1]]


MODELS = [
    Model("resnet_block", "resnet_block.textproto", [2, 3, 20, 24], "FP32", False, 11),
    Model("mobilenet_block", "mobilenet_block.json", [2, 8, 12, 10], "FP16", True, 12),
    Model("video_block", "video_block.textproto", [1, 4, 4, 8, 8], "BF16", True, 13),
]


def reexec_in_venv(venv):
    """Continues in the venv's Python (where tritonclient is installed)."""
    venv = os.path.abspath(venv)
    if os.path.abspath(sys.prefix) == venv:
        return
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        print("FAIL test venv: %s not found; scripts/setup.sh creates it" % python)
        print("tritonclient_test: 0 passed, 1 failed, 0 skipped", flush=True)
        sys.exit(1)
    os.execv(python, [python] + sys.argv)


class Test(ModelChecks):
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.work_dir)
        self.env = clean_env()
        # gRPC reads proxy variables when a channel is made.
        os.environ.clear()
        os.environ.update(self.env)
        # Not for the children (self.env): grpcio's fork support restarts
        # gRPC's threads in a forked child, and children started with a
        # preexec_fn (fork, Python code, exec) then ran them on descriptors
        # subprocess had just closed and aborted before exec (grpcio 1.85:
        # "epoll_wait error: Bad file descriptor", exit -6, in one run of 3).
        # Children now run no Python before exec (die_with_parent).
        os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
        self.checks = Checks()
        self.server = ServerProcess(args.server, ["--backend=cpu", "--metrics_listen="],
                                    os.path.join(self.work, "server.log"), self.env)
        self.client = None
        self.client_port = None
        # Regions made with tritonclient.utils.shared_memory, by name: the
        # handle, destroyed at the end; and those registered now: key and
        # byte size.
        self.regions = {}
        self.registered = {}
        import numpy
        import tritonclient
        import tritonclient.grpc as grpcclient
        import tritonclient.utils as utils
        import tritonclient.utils.shared_memory as shm
        self.np = numpy
        self.tritonclient = tritonclient
        self.grpcclient = grpcclient
        self.utils = utils
        self.shm = shm

    # ---- helpers -------------------------------------------------------------

    def np_dtype(self, datatype):
        return self.utils.triton_to_np_dtype(datatype)

    def input_array(self, model):
        return self.np.frombuffer(model.input, dtype=self.np_dtype(model.datatype)).reshape(
            model.byte_order(model.input_shape))

    def output_bytes_count(self, model):
        return len(model.output)

    def expect_error(self, status, fn, *args, **kwargs):
        """Runs fn; it must raise InferenceServerException with `status`
        (e.g. "StatusCode.NOT_FOUND"). Returns the exception's message."""
        try:
            fn(*args, **kwargs)
        except self.utils.InferenceServerException as e:
            assert e.status() == status, "got %s: %s, want %s" % (e.status(), e.message(), status)
            assert e.message(), "%s without a message" % status
            return e.message()
        raise AssertionError("succeeded; want %s" % status)

    def new_region(self, name, byte_size):
        """A system shared memory region made by tritonclient and registered
        under `name` (key /convserve_tc_<pid>_<name>)."""
        key = "/convserve_tc_%d_%s" % (os.getpid(), name)
        handle = self.shm.create_shared_memory_region(name, key, byte_size, create_only=True)
        self.regions[name] = handle
        self.client.register_system_shared_memory(name, key, byte_size,
                                                  client_timeout=RPC_TIMEOUT_S)
        self.registered[name] = (key, byte_size)
        return handle

    def unregister(self, name=""):
        self.client.unregister_system_shared_memory(name, client_timeout=RPC_TIMEOUT_S)
        for gone in ([name] if name else list(self.registered)):
            del self.registered[gone]

    def destroy_regions(self):
        for handle in self.regions.values():
            self.shm.destroy_shared_memory_region(handle)
        self.regions = {}

    def shm_request(self, model, in_region, in_offset, out_region, out_offset, out_size):
        inp = self.grpcclient.InferInput("input", model.byte_order(model.input_shape),
                                         model.datatype)
        inp.set_shared_memory(in_region, len(model.input), offset=in_offset)
        out = self.grpcclient.InferRequestedOutput("output")
        out.set_shared_memory(out_region, out_size, offset=out_offset)
        return [inp], [out]

    def raw_inputs(self, model, datatype=None):
        inp = self.grpcclient.InferInput("input", model.byte_order(model.input_shape),
                                         datatype or model.datatype)
        inp.set_data_from_numpy(self.input_array(model))
        return [inp]

    def check_raw_result(self, model, result):
        """The output of a raw answer, checked against the C++ client's."""
        got = result.as_numpy("output")
        assert got is not None, "no output named 'output'"
        want_shape = model.byte_order(model.output_shape)
        assert list(got.shape) == want_shape, "shape %s, want %s" % (list(got.shape), want_shape)
        assert got.dtype == self.np_dtype(model.datatype), "dtype %s" % got.dtype
        assert got.tobytes() == model.output, "output differs from the C++ client's"
        got_checksum = "%016x" % fnv1a64(got.tobytes())
        assert got_checksum == model.checksum, "fnv1a64 %s, convserve-load printed %s" % (
            got_checksum, model.checksum)

    # ---- server and graphs ---------------------------------------------------

    def is_live(self, port):
        if self.client is None or self.client_port != port:
            if self.client is not None:
                self.client.close()
            self.client = self.grpcclient.InferenceServerClient("127.0.0.1:%d" % port)
            self.client_port = port
        try:
            return self.client.is_server_live(client_timeout=1), "live=False"
        except self.utils.InferenceServerException as e:
            # A fresh channel for the next try: no reconnect backoff.
            self.client.close()
            self.client = None
            return False, "%s: %s" % (e.status(), e.message())

    def start_server(self):
        from importlib import metadata
        return self.server.start(self.is_live) + " (tritonclient %s, grpcio %s)" % (
            metadata.version("tritonclient"), metadata.version("grpcio"))

    def load(self, model):
        tag = model.name
        in_path = os.path.join(self.work, "in_%s.bin" % tag)
        out_path = os.path.join(self.work, "out_%s.bin" % tag)
        cmd = [self.args.load, "--server=127.0.0.1:%d" % self.server.port,
               "--graph_file=" + os.path.join(self.args.examples, model.graph_file),
               "--seed=%d" % WEIGHT_SEED,
               "--input_shape=" + ",".join(str(d) for d in model.input_shape),
               "--input_seed=%d" % model.input_seed, "--save_input=" + in_path,
               "--save_output=" + out_path]
        done = subprocess.run(die_with_parent(cmd), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=LOAD_TIMEOUT_S, env=self.env)
        text = done.stdout.decode(errors="replace")
        assert done.returncode == 0, "convserve-load exited with %d:\n%s" % (done.returncode, text)
        assert "loaded graph '%s'" % model.name in text, "no 'loaded graph' line:\n" + text
        m = re.search(r"^output \[([0-9, ]*)\] (\w+):.* fnv1a64=([0-9a-f]{16})", text, re.M)
        assert m, "no output line in convserve-load's output:\n" + text
        model.output_shape = [int(d) for d in m.group(1).split(",")]
        graph_id = re.search(r"^loaded graph '[^']*' id=([0-9a-f]+)", text, re.M)
        assert graph_id, "no graph id in convserve-load's output:\n" + text
        model.graph_id = graph_id.group(1)
        with open(in_path, "rb") as f:
            model.input = f.read()
        with open(out_path, "rb") as f:
            model.output = f.read()
        assert len(model.input) == self.input_array(model).nbytes
        # Every later comparison is with these bytes: they must be what
        # convserve-load printed the checksum of.
        model.checksum = m.group(3)
        assert "%016x" % fnv1a64(model.output) == model.checksum, "saved output differs"
        return "%s input %s, output %s %s (%d bytes, fnv1a64=%s)" % (
            model.datatype, model.input_shape, model.output_shape, m.group(2),
            len(model.output), model.checksum)

    # ---- health and metadata ---------------------------------------------------

    def check_live(self):
        live = self.client.is_server_live(client_timeout=RPC_TIMEOUT_S)
        assert live is True, "is_server_live() = %r" % live
        return "True"

    def check_ready(self):
        ready = self.client.is_server_ready(client_timeout=RPC_TIMEOUT_S)
        assert ready is True, "is_server_ready() = %r" % ready
        return "True"

    def check_server_metadata(self):
        md = self.client.get_server_metadata(client_timeout=RPC_TIMEOUT_S)
        assert md.name == "convserve", "name %r" % md.name
        assert md.version, "no version"
        extensions = list(md.extensions)
        # Exactly what is served on a CPU server.
        want = ["model_configuration", "statistics", "model_repository", "system_shared_memory"]
        assert sorted(extensions) == sorted(want), "extensions %s, want %s" % (extensions, want)
        # A CPU server serves no CUDA shared memory.
        assert "cuda_shared_memory" not in extensions, "extensions %s" % extensions
        return "name=%s version=%s extensions=%s" % (md.name, md.version, extensions)

    def check_model_ready(self, model):
        ready = self.client.is_model_ready(model.name, client_timeout=RPC_TIMEOUT_S)
        assert ready is True, "is_model_ready(%r) = %r" % (model.name, ready)
        return "True"

    def check_unknown_model_not_ready(self):
        ready = self.client.is_model_ready("no_such_model", client_timeout=RPC_TIMEOUT_S)
        assert ready is False, "is_model_ready('no_such_model') = %r" % ready
        return "False"

    def check_model_metadata(self, model):
        md = self.client.get_model_metadata(model.name, client_timeout=RPC_TIMEOUT_S)
        assert md.name == model.name, "name %r" % md.name
        assert list(md.versions) == ["1"], "versions %s" % list(md.versions)
        assert len(md.inputs) == 1 and len(md.outputs) == 1, str(md)
        rank = len(model.input_shape)
        for tensor, name, channels in ((md.inputs[0], "input", model.input_shape[1]),
                                       (md.outputs[0], "output", model.output_shape[1])):
            want = [-1] * rank
            want[1] = channels
            want = model.byte_order(want)
            assert tensor.name == name, "tensor name %r, want %r" % (tensor.name, name)
            assert tensor.datatype == model.datatype, "%s datatype %r" % (name, tensor.datatype)
            assert list(tensor.shape) == want, "%s shape %s, want %s" % (name, list(tensor.shape),
                                                                         want)
        return "input %s %s, output %s %s" % (md.inputs[0].datatype, list(md.inputs[0].shape),
                                              md.outputs[0].datatype, list(md.outputs[0].shape))

    # ---- inference -------------------------------------------------------------

    def check_infer_raw(self, model):
        result = self.client.infer(model.name, self.raw_inputs(model),
                                   outputs=[self.grpcclient.InferRequestedOutput("output")],
                                   request_id="raw-" + model.name, client_timeout=RPC_TIMEOUT_S)
        self.check_raw_result(model, result)
        assert result.get_response().id == "raw-" + model.name
        return "%d output bytes identical to the C++ client's (fnv1a64=%s)" % (
            len(model.output), model.checksum)

    def check_output_in_region(self, model, result, region, offset):
        out = result.get_output("output")
        assert out is not None, "no output named 'output'"
        raw = result.get_response().raw_output_contents
        # One empty entry, as Triton sends: its C++ client indexes it.
        assert len(raw) == 1 and len(raw[0]) == 0, "raw_output_contents %r" % [len(r) for r in raw]
        want_shape = model.byte_order(model.output_shape)
        assert list(out.shape) == want_shape, "shape %s, want %s" % (list(out.shape), want_shape)
        assert out.datatype == model.datatype, "datatype %r" % out.datatype
        p = out.parameters
        assert p["shared_memory_region"].string_param == region, str(p)
        assert p["shared_memory_byte_size"].int64_param == len(model.output), str(p)
        if offset:
            assert p["shared_memory_offset"].int64_param == offset, str(p)
        got = self.shm.get_contents_as_numpy(self.regions[region], self.np_dtype(model.datatype),
                                             want_shape, offset=offset)
        assert got.tobytes() == model.output, "the region's output differs from the raw answer"

    def check_infer_shm_separate(self, model):
        """Input and output each in a region of their own."""
        in_name, out_name = model.name + "_in", model.name + "_out"
        in_handle = self.new_region(in_name, len(model.input))
        self.new_region(out_name, len(model.output))
        self.shm.set_shared_memory_region(in_handle, [self.input_array(model)])
        inputs, outputs = self.shm_request(model, in_name, 0, out_name, 0, len(model.output))
        result = self.client.infer(model.name, inputs, outputs=outputs,
                                   client_timeout=RPC_TIMEOUT_S)
        self.check_output_in_region(model, result, out_name, 0)
        return "regions %s (%d bytes) -> %s (%d bytes): identical to the raw answer" % (
            in_name, len(model.input), out_name, len(model.output))

    def check_infer_shm_one_region(self, model):
        """Input and output in one region, both at an offset."""
        name = model.name + "_both"
        in_offset = 16
        out_offset = (in_offset + len(model.input) + 63) // 64 * 64
        handle = self.new_region(name, out_offset + len(model.output))
        self.shm.set_shared_memory_region(handle, [self.input_array(model)], offset=in_offset)
        inputs, outputs = self.shm_request(model, name, in_offset, name, out_offset,
                                           len(model.output))
        result = self.client.infer(model.name, inputs, outputs=outputs,
                                   client_timeout=RPC_TIMEOUT_S)
        self.check_output_in_region(model, result, name, out_offset)
        return "region %s: input at %d, output at %d: identical to the raw answer" % (
            name, in_offset, out_offset)

    def check_shm_status(self):
        status = self.client.get_system_shared_memory_status(client_timeout=RPC_TIMEOUT_S)
        listed = {name: (r.name, r.key, r.offset, r.byte_size)
                  for name, r in status.regions.items()}
        want = {name: (name, key, 0, size) for name, (key, size) in self.registered.items()}
        assert listed == want, "listed %s, registered %s" % (listed, want)
        one_name = sorted(listed)[0]
        one = self.client.get_system_shared_memory_status(one_name, client_timeout=RPC_TIMEOUT_S)
        assert list(one.regions) == [one_name], "filtered: %s" % list(one.regions)
        return "%d regions listed with key, offset and byte_size; filter by name gives 1" % (
            len(listed))

    def check_status_unknown_region(self):
        message = self.expect_error("StatusCode.NOT_FOUND",
                                    self.client.get_system_shared_memory_status, "no_such_region",
                                    client_timeout=RPC_TIMEOUT_S)
        assert "no_such_region" in message, message
        return "NOT_FOUND: " + message

    # ---- errors ----------------------------------------------------------------

    def check_unknown_region(self):
        model = MODELS[0]
        inputs, outputs = self.shm_request(model, "no_such_region", 0, model.name + "_out", 0,
                                           len(model.output))
        message = self.expect_error("StatusCode.NOT_FOUND", self.client.infer, model.name,
                                    inputs, outputs=outputs, client_timeout=RPC_TIMEOUT_S)
        assert "no_such_region" in message, message
        return "NOT_FOUND: " + message

    def check_size_mismatch(self):
        model = MODELS[0]
        inputs, outputs = self.shm_request(model, model.name + "_in", 0, model.name + "_out", 0,
                                           len(model.output))
        inputs[0].set_shared_memory(model.name + "_in", len(model.input) - 4)
        message = self.expect_error("StatusCode.INVALID_ARGUMENT", self.client.infer, model.name,
                                    inputs, outputs=outputs, client_timeout=RPC_TIMEOUT_S)
        assert "shared_memory_byte_size" in message, message
        return "INVALID_ARGUMENT: " + message

    def check_output_region_too_small(self):
        model = MODELS[0]
        inputs, outputs = self.shm_request(model, model.name + "_in", 0, model.name + "_out", 0,
                                           len(model.output) - 4)
        message = self.expect_error("StatusCode.INVALID_ARGUMENT", self.client.infer, model.name,
                                    inputs, outputs=outputs, client_timeout=RPC_TIMEOUT_S)
        assert "shared_memory_byte_size" in message, message
        return "INVALID_ARGUMENT: " + message

    def check_register_taken_name(self):
        name = MODELS[0].name + "_in"
        message = self.expect_error("StatusCode.ALREADY_EXISTS",
                                    self.client.register_system_shared_memory, name,
                                    self.registered[name][0], 64,
                                    client_timeout=RPC_TIMEOUT_S)
        assert name in message, message
        return "ALREADY_EXISTS: " + message

    def check_register_unknown_key(self):
        key = "/convserve_tc_%d_never_created" % os.getpid()
        message = self.expect_error("StatusCode.NOT_FOUND",
                                    self.client.register_system_shared_memory, "nowhere", key, 64,
                                    client_timeout=RPC_TIMEOUT_S)
        assert key in message, message
        return "NOT_FOUND: " + message

    def check_register_past_end(self):
        key, size = self.registered[MODELS[0].name + "_in"]
        message = self.expect_error("StatusCode.INVALID_ARGUMENT",
                                    self.client.register_system_shared_memory, "past_end", key,
                                    size, offset=1, client_timeout=RPC_TIMEOUT_S)
        assert "past_end" in message, message
        return "INVALID_ARGUMENT: " + message

    # ---- unregister -------------------------------------------------------------

    def check_unregister_one(self):
        model = MODELS[0]
        name = model.name + "_in"
        self.unregister(name)
        status = self.client.get_system_shared_memory_status(client_timeout=RPC_TIMEOUT_S)
        assert name not in status.regions, "still listed: %s" % list(status.regions)
        assert sorted(status.regions) == sorted(self.registered), list(status.regions)
        inputs, outputs = self.shm_request(model, name, 0, model.name + "_out", 0,
                                           len(model.output))
        message = self.expect_error("StatusCode.NOT_FOUND", self.client.infer, model.name,
                                    inputs, outputs=outputs, client_timeout=RPC_TIMEOUT_S)
        return "%s gone from the status; infer naming it -> NOT_FOUND: %s" % (name, message)

    def check_unregister_all(self):
        count = len(self.registered)
        self.unregister()
        status = self.client.get_system_shared_memory_status(client_timeout=RPC_TIMEOUT_S)
        assert len(status.regions) == 0, "still listed: %s" % list(status.regions)
        self.destroy_regions()
        return "%d regions unregistered; status lists none" % count

    # ---- streaming --------------------------------------------------------------

    def check_stream(self):
        """Several requests in flight on one stream, answered byte for byte as
        the raw calls were, and a bad request answered with an error in the
        callback while the others go on."""
        answers = queue.Queue()

        def callback(result, error):
            answers.put((result, error))

        def next_answer():
            try:
                return answers.get(timeout=RPC_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError("no stream answer within %ds" % RPC_TIMEOUT_S) from None

        self.client.start_stream(callback=callback, stream_timeout=STREAM_TIMEOUT_S)
        try:
            # The first request alone: a server that ended the stream at once
            # (UNIMPLEMENTED, say) makes tritonclient refuse to send it, and
            # the callback has the error.
            first = MODELS[0]
            try:
                self.client.async_stream_infer(first.name, self.raw_inputs(first),
                                               request_id="stream-first")
            except self.utils.InferenceServerException:
                pass
            result, error = next_answer()
            assert error is None, "first stream request failed: %s %s" % (error.status(),
                                                                          error.message())
            self.check_raw_result(first, result)
            assert result.get_response().id == "stream-first", result.get_response().id

            # Then everything at once: two requests per model, one with input
            # and output in shared memory, and a bad one in the middle.
            shm_model = MODELS[1]
            in_handle = self.new_region("stream_in", len(shm_model.input))
            self.new_region("stream_out", len(shm_model.output))
            self.shm.set_shared_memory_region(in_handle, [self.input_array(shm_model)])
            expected = {}
            for round_ in range(2):
                for model in MODELS:
                    request_id = "stream-%s-%d" % (model.name, round_)
                    self.client.async_stream_infer(model.name, self.raw_inputs(model),
                                                   request_id=request_id)
                    expected[request_id] = model
                if round_ == 0:
                    bad = MODELS[0]  # FP32, sent as FP16
                    self.client.async_stream_infer(bad.name,
                                                   self.raw_inputs(MODELS[1], datatype="FP16"),
                                                   request_id="stream-bad")
            inputs, outputs = self.shm_request(shm_model, "stream_in", 0, "stream_out", 0,
                                               len(shm_model.output))
            self.client.async_stream_infer(shm_model.name, inputs, outputs=outputs,
                                           request_id="stream-shm")
            answered, errors = {}, []
            for _ in range(len(expected) + 2):
                result, error = next_answer()
                if error is not None:
                    errors.append(error)
                    continue
                answered[result.get_response().id] = result
            assert len(errors) == 1, "errors: %s" % [str(e) for e in errors]
            assert "datatype" in errors[0].message(), errors[0].message()
            assert set(answered) == set(expected) | {"stream-shm"}, sorted(answered)
            for request_id, model in expected.items():
                try:
                    self.check_raw_result(model, answered[request_id])
                except AssertionError as e:
                    raise AssertionError("%s: %s" % (request_id, e)) from None
            self.check_output_in_region(shm_model, answered["stream-shm"], "stream_out", 0)
        finally:
            self.client.stop_stream()
        for name in ("stream_in", "stream_out"):
            self.unregister(name)
        return ("%d requests in flight answered byte for byte (one in shared memory); the bad "
                "one's error in the callback: %s" % (len(expected) + 1, errors[0].message()))

    # ---- driver -------------------------------------------------------------------

    def main(self):
        start = time.monotonic()
        os.makedirs(self.work, exist_ok=True)
        for name in os.listdir(self.work):
            os.remove(os.path.join(self.work, name))
        c = self.checks
        try:
            if not c.run("start convserve-server, is_server_live polled until live",
                         self.start_server)[0]:
                return c.summary("tritonclient_test")
            c.run("is_server_live", self.check_live)
            c.run("is_server_ready", self.check_ready)
            c.run("get_server_metadata", self.check_server_metadata)
            loaded = [m for m in MODELS
                      if c.run("convserve-load loads %s and infers" % m.name, self.load, m)[0]]
            for m in loaded:
                c.run("is_model_ready(%s)" % m.name, self.check_model_ready, m)
            c.run("is_model_ready(no_such_model)", self.check_unknown_model_not_ready)
            for m in loaded:
                c.run("get_model_metadata(%s)" % m.name, self.check_model_metadata, m)
            for m in loaded:
                c.run("get_model_config(%s)" % m.name, self.check_model_config, m)
            c.run("get_model_config(no_such_model) -> NOT_FOUND", self.check_model_config_unknown)
            c.run("get_model_repository_index", self.check_repository_index, loaded)
            raw_ok = [m for m in loaded
                      if c.run("infer %s, raw bytes" % m.name, self.check_infer_raw, m)[0]]
            if raw_ok:
                c.run("async_infer, every model at once", self.check_async_infer, raw_ok)
            for m in raw_ok:
                c.run("get_inference_statistics(%s) after one success and one failure" % m.name,
                      self.check_statistics, m)
            c.run("get_inference_statistics() (all)", self.check_statistics_all, loaded)
            c.run("get_inference_statistics(no_such_model) -> NOT_FOUND",
                  self.check_statistics_unknown)
            for m in raw_ok:
                c.run("infer %s, input and output in system shared memory" % m.name,
                      self.check_infer_shm_separate, m)
            for m in raw_ok:
                c.run("infer %s, input and output in one region at offsets" % m.name,
                      self.check_infer_shm_one_region, m)
            if MODELS[0] in raw_ok:
                c.run("get_system_shared_memory_status", self.check_shm_status)
                c.run("get_system_shared_memory_status(no_such_region) -> NOT_FOUND",
                      self.check_status_unknown_region)
                c.run("infer with an unknown region -> NOT_FOUND", self.check_unknown_region)
                c.run("infer with byte_size != the input's bytes -> INVALID_ARGUMENT",
                      self.check_size_mismatch)
                c.run("infer with an output region below the output -> INVALID_ARGUMENT",
                      self.check_output_region_too_small)
                c.run("register_system_shared_memory, taken name -> ALREADY_EXISTS",
                      self.check_register_taken_name)
                c.run("register_system_shared_memory, no such key -> NOT_FOUND",
                      self.check_register_unknown_key)
                c.run("register_system_shared_memory, past the object -> INVALID_ARGUMENT",
                      self.check_register_past_end)
                c.run("unregister_system_shared_memory(name)", self.check_unregister_one)
            c.run("unregister_system_shared_memory() (all)", self.check_unregister_all)
            if len(raw_ok) == len(MODELS):
                c.run("start_stream / async_stream_infer / stop_stream", self.check_stream)
            c.run("register_cuda_shared_memory on a CPU server -> FAILED_PRECONDITION",
                  self.check_cuda_register)
            c.run("get_cuda_shared_memory_status", self.check_cuda_status)
            c.run("unregister_cuda_shared_memory", self.check_cuda_unregister)
            c.run("get_log_settings -> UNIMPLEMENTED", self.check_unimplemented,
                  self.client.get_log_settings)
            c.run("update_log_settings -> UNIMPLEMENTED", self.check_unimplemented,
                  self.client.update_log_settings, {"log_verbose_level": 1})
            c.run("get_trace_settings -> UNIMPLEMENTED", self.check_unimplemented,
                  self.client.get_trace_settings)
            c.run("update_trace_settings -> UNIMPLEMENTED", self.check_unimplemented,
                  self.client.update_trace_settings, None, {"trace_rate": "1"})
            if loaded:
                c.run("load_model(%s), already loaded" % loaded[0].name, self.check_load_loaded,
                      loaded[0])
                c.run("load_model with a config -> UNIMPLEMENTED", self.check_load_with_config,
                      loaded[0])
            if raw_ok:
                c.run("unload_model(%s), then load_model" % raw_ok[0].name,
                      self.check_unload_and_load, raw_ok[0])
            c.run("unload_model(no_such_model) -> NOT_FOUND", self.check_unload_unknown)
        finally:
            try:
                self.destroy_regions()
            finally:
                if self.client is not None:
                    self.client.close()
                if self.server.process is not None:
                    c.run("server stops cleanly on SIGTERM", self.server.stop)
        print("runtime %.1fs" % (time.monotonic() - start))
        return c.summary("tritonclient_test")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", required=True, help="the test venv (scripts/setup.sh)")
    parser.add_argument("--server", required=True, help="convserve-server binary")
    parser.add_argument("--load", required=True, help="convserve-load binary")
    parser.add_argument("--examples", required=True, help="deploy/examples")
    parser.add_argument("--work_dir", required=True)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    reexec_in_venv(arguments.venv)
    sys.exit(Test(arguments).main())
