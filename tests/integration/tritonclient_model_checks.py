"""The tritonclient_test checks of Triton's model configuration, statistics,
model repository, async_infer, CUDA shared memory (on a CPU server), and the
trace and logging calls convserve does not serve. A mixin of
tritonclient_test.Test: it uses its client, models and helpers.
"""

import base64
import queue

RPC_TIMEOUT_S = 30
# tritonclient's model_config_pb2 enum names, by KServe datatype.
CONFIG_TYPES = {"FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BF16": "TYPE_BF16"}


def fnv1a64(data):
    """The checksum convserve-load prints for an output (fnv1a64=...)."""
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


class ModelChecks:
    # ---- model configuration -------------------------------------------------

    def check_model_config(self, model):
        from tritonclient.grpc import model_config_pb2
        config = self.client.get_model_config(model.name, client_timeout=RPC_TIMEOUT_S).config
        assert config.name == model.name, "name %r" % config.name
        assert config.platform == "convserve", "platform %r" % config.platform
        assert config.max_batch_size == 0, "max_batch_size %d" % config.max_batch_size
        assert len(config.input) == 1 and len(config.output) == 1, str(config)
        metadata = self.client.get_model_metadata(model.name, client_timeout=RPC_TIMEOUT_S)
        want_type = CONFIG_TYPES[model.datatype]
        for tensor, meta in ((config.input[0], metadata.inputs[0]),
                             (config.output[0], metadata.outputs[0])):
            assert tensor.name == meta.name, "tensor %r, metadata %r" % (tensor.name, meta.name)
            got_type = model_config_pb2.DataType.Name(tensor.data_type)
            assert got_type == want_type, "%s data_type %s, want %s" % (tensor.name, got_type,
                                                                        want_type)
            assert list(tensor.dims) == list(meta.shape), "%s dims %s, metadata %s" % (
                tensor.name, list(tensor.dims), list(meta.shape))
        rank = len(model.input_shape)
        want_format = ("FORMAT_NONE" if rank != 4 else
                       "FORMAT_NHWC" if model.channels_last else "FORMAT_NCHW")
        got_format = model_config_pb2.ModelInput.Format.Name(config.input[0].format)
        assert got_format == want_format, "format %s, want %s" % (got_format, want_format)
        parameters = {k: v.string_value for k, v in config.parameters.items()}
        assert parameters.get("graph_id") == model.graph_id, "parameters %s, graph id %s" % (
            parameters, model.graph_id)
        assert not config.HasField("dynamic_batching"), "dynamic_batching without batching"
        as_json = self.client.get_model_config(model.name, as_json=True,
                                               client_timeout=RPC_TIMEOUT_S)
        assert as_json["config"]["name"] == model.name, str(as_json)
        return "platform convserve, max_batch_size 0, input %s %s %s, output %s %s, %s" % (
            want_type, list(config.input[0].dims), got_format, want_type,
            list(config.output[0].dims), parameters)

    def check_model_config_unknown(self):
        message = self.expect_error("StatusCode.NOT_FOUND", self.client.get_model_config,
                                    "no_such_model", client_timeout=RPC_TIMEOUT_S)
        assert "no_such_model" in message, message
        return "NOT_FOUND: " + message

    # ---- statistics ------------------------------------------------------------

    def model_stats(self, name):
        stats = self.client.get_inference_statistics(name, client_timeout=RPC_TIMEOUT_S)
        assert len(stats.model_stats) == 1, "%d entries for %s" % (len(stats.model_stats), name)
        return stats.model_stats[0]

    def check_statistics(self, model):
        """One more success and one more failure show up, with durations."""
        before = self.model_stats(model.name)
        result = self.client.infer(model.name, self.raw_inputs(model),
                                   client_timeout=RPC_TIMEOUT_S)
        self.check_raw_result(model, result)
        # Refused by the server (tritonclient checks datatypes itself).
        misnamed = self.grpcclient.InferInput("not_input", model.byte_order(model.input_shape),
                                              model.datatype)
        misnamed.set_data_from_numpy(self.input_array(model))
        self.expect_error("StatusCode.INVALID_ARGUMENT", self.client.infer, model.name,
                          [misnamed], client_timeout=RPC_TIMEOUT_S)
        after = self.model_stats(model.name)
        s, b = after.inference_stats, before.inference_stats
        assert after.name == model.name and after.version == "1", "%s %s" % (after.name,
                                                                            after.version)
        assert after.inference_count == before.inference_count + 1, "inference_count %d -> %d" % (
            before.inference_count, after.inference_count)
        assert after.execution_count == after.inference_count, "execution_count %d" % (
            after.execution_count)
        assert s.success.count == after.inference_count, "success.count %d" % s.success.count
        assert s.success.ns > b.success.ns, "success.ns %d -> %d" % (b.success.ns, s.success.ns)
        assert s.fail.count == b.fail.count + 1, "fail.count %d -> %d" % (b.fail.count,
                                                                          s.fail.count)
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            count = getattr(s, stage).count
            assert count == s.success.count, "%s.count %d, success.count %d" % (
                stage, count, s.success.count)
        assert s.compute_infer.ns > 0, "compute_infer.ns 0"
        assert after.last_inference >= before.last_inference > 0, "last_inference %d -> %d" % (
            before.last_inference, after.last_inference)
        assert len(after.batch_stats) == 1, "batch_stats %s" % after.batch_stats
        batch = after.batch_stats[0]
        assert batch.batch_size == 1, "batch_size %d" % batch.batch_size
        assert batch.compute_infer.count == s.compute_infer.count, str(batch)
        return ("inference_count %d -> %d, fail %d -> %d; success %.3f ms, queue %.3f ms, "
                "compute_input %.3f ms, compute_infer %.3f ms, compute_output %.3f ms (totals); "
                "batch_stats [batch_size 1 x %d]" % (
                    before.inference_count, after.inference_count, b.fail.count, s.fail.count,
                    s.success.ns / 1e6, s.queue.ns / 1e6, s.compute_input.ns / 1e6,
                    s.compute_infer.ns / 1e6, s.compute_output.ns / 1e6,
                    batch.compute_infer.count))

    def check_statistics_all(self, models):
        stats = self.client.get_inference_statistics(client_timeout=RPC_TIMEOUT_S)
        names = sorted(m.name for m in stats.model_stats)
        assert names == sorted(m.name for m in models), "listed %s" % names
        as_json = self.client.get_inference_statistics(as_json=True, client_timeout=RPC_TIMEOUT_S)
        assert len(as_json["model_stats"]) == len(models), str(as_json)
        return "%d models listed: %s" % (len(names), names)

    def check_statistics_unknown(self):
        message = self.expect_error("StatusCode.NOT_FOUND", self.client.get_inference_statistics,
                                    "no_such_model", client_timeout=RPC_TIMEOUT_S)
        return "NOT_FOUND: " + message

    # ---- model repository ------------------------------------------------------

    def repository(self):
        index = self.client.get_model_repository_index(client_timeout=RPC_TIMEOUT_S)
        return {m.name: (m.version, m.state) for m in index.models}

    def check_repository_index(self, models):
        listed = self.repository()
        want = {m.name: ("1", "READY") for m in models}
        assert listed == want, "listed %s, want %s" % (listed, want)
        return "%s" % sorted(listed.items())

    def check_load_loaded(self, model):
        self.client.load_model(model.name, client_timeout=RPC_TIMEOUT_S)
        assert self.client.is_model_ready(model.name, client_timeout=RPC_TIMEOUT_S)
        return "OK: already loaded, nothing to reload"

    def check_unload_and_load(self, model):
        """unload_model unloads the graph; load_model cannot bring it back
        (no repository) and says how; convserve-load does, byte for byte."""
        self.client.unload_model(model.name, client_timeout=RPC_TIMEOUT_S)
        assert not self.client.is_model_ready(model.name, client_timeout=RPC_TIMEOUT_S)
        assert model.name not in self.repository(), "still in the index"
        infer_message = self.expect_error("StatusCode.NOT_FOUND", self.client.infer, model.name,
                                          self.raw_inputs(model), client_timeout=RPC_TIMEOUT_S)
        load_message = self.expect_error("StatusCode.FAILED_PRECONDITION",
                                         self.client.load_model, model.name,
                                         client_timeout=RPC_TIMEOUT_S)
        assert "LoadGraph" in load_message, load_message
        output = model.output
        self.load(model)  # convserve-load registers the same graph again
        assert model.output == output, "the reloaded graph answers differently"
        assert self.client.is_model_ready(model.name, client_timeout=RPC_TIMEOUT_S)
        self.check_infer_raw(model)
        return ("unloaded (not ready, not listed, infer -> NOT_FOUND: %s); load_model -> "
                "FAILED_PRECONDITION: %s; reloaded by convserve-load, same bytes" % (
                    infer_message, load_message))

    def check_load_with_config(self, model):
        message = self.expect_error("StatusCode.UNIMPLEMENTED", self.client.load_model,
                                    model.name, config='{"backend": "onnxruntime"}',
                                    client_timeout=RPC_TIMEOUT_S)
        assert "LoadGraph" in message, message
        return "UNIMPLEMENTED: " + message

    def check_unload_unknown(self):
        message = self.expect_error("StatusCode.NOT_FOUND", self.client.unload_model,
                                    "no_such_model", client_timeout=RPC_TIMEOUT_S)
        assert "no_such_model" in message, message
        return "NOT_FOUND: " + message

    # ---- async_infer ---------------------------------------------------------------

    def check_async_infer(self, models):
        answers = queue.Queue()
        for model in models:
            self.client.async_infer(model.name, self.raw_inputs(model),
                                    lambda result, error, m=model: answers.put((m, result, error)),
                                    request_id="async-" + model.name,
                                    client_timeout=RPC_TIMEOUT_S)
        for _ in models:
            model, result, error = answers.get(timeout=RPC_TIMEOUT_S)
            assert error is None, "%s: %s" % (model.name, error)
            self.check_raw_result(model, result)
            assert result.get_response().id == "async-" + model.name
        return "%d requests in flight, each output identical to the C++ client's" % len(models)

    # ---- CUDA shared memory on a CPU server ------------------------------------------

    def check_cuda_register(self):
        handle = base64.b64encode(bytes(64))  # a cudaIpcMemHandle_t's size
        message = self.expect_error("StatusCode.FAILED_PRECONDITION",
                                    self.client.register_cuda_shared_memory, "cuda_region",
                                    handle, 0, 1024, client_timeout=RPC_TIMEOUT_S)
        assert "system shared memory" in message, message
        return "FAILED_PRECONDITION: " + message

    def check_cuda_status(self):
        status = self.client.get_cuda_shared_memory_status(client_timeout=RPC_TIMEOUT_S)
        assert len(status.regions) == 0, "regions %s" % list(status.regions)
        return "no regions"

    def check_cuda_unregister(self):
        self.client.unregister_cuda_shared_memory(client_timeout=RPC_TIMEOUT_S)
        message = self.expect_error("StatusCode.NOT_FOUND",
                                    self.client.unregister_cuda_shared_memory, "cuda_region",
                                    client_timeout=RPC_TIMEOUT_S)
        return "all: OK (none); by name -> NOT_FOUND: " + message

    # ---- trace and logging (not served) -------------------------------------------------

    def check_unimplemented(self, fn, *args, **kwargs):
        message = self.expect_error("StatusCode.UNIMPLEMENTED", fn, *args,
                                    client_timeout=RPC_TIMEOUT_S, **kwargs)
        return "UNIMPLEMENTED: " + message
