// libFuzzer target: the bytes of a KServe ModelInfer request as gRPC hands
// them to the server (in slices): the tensor wire parser (raw_input_contents
// out of the message), then KServeService's request checking (model, outputs,
// input tensor, shared-memory parameters resolved against two registered
// system regions, compute limit) and response building, on a runner that
// computes nothing (tests/fuzz/fuzz_server.h). The same message parsed by
// protobuf also goes the streaming path's way (raw inputs in the message).
// Oracles: the wire parser accepts exactly what protobuf accepts and yields
// the same message and tensors; a bad request is answered with a client's
// error code; a good one's response serializes and parses, with an output of
// the size its shape says.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_server.h"

namespace convserve {
namespace {

void Expect(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "model_infer_fuzzer: %s\n", what);
  std::abort();
}

size_t KServeElementSize(const std::string& datatype) { return datatype == "FP32" ? 4 : 2; }

// Checks one answer; `output` is the raw path's output buffer.
void CheckAnswer(const absl::Status& status, const inference::ModelInferResponse& response,
                 const TensorMemory* output) {
  if (!status.ok()) {
    CheckClientError(status);
    return;
  }
  Expect(response.outputs_size() == 1, "an OK answer without its output");
  const auto& tensor = response.outputs(0);
  int64_t elements = 1;
  for (int64_t d : tensor.shape()) elements *= d;
  const size_t bytes = static_cast<size_t>(elements) * KServeElementSize(tensor.datatype());
  if (tensor.parameters().count("shared_memory_region") > 0) {
    Expect(tensor.parameters().at("shared_memory_byte_size").int64_param() ==
               static_cast<int64_t>(bytes),
           "the output region's byte size does not match the shape");
    return;
  }
  absl::StatusOr<grpc::ByteBuffer> serialized = SerializeModelInferResponse(response, output);
  Expect(serialized.ok(), "an OK response does not serialize");
  std::vector<grpc::Slice> slices;
  Expect(serialized->Dump(&slices).ok(), "a response does not dump");
  std::string flat;
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  inference::ModelInferResponse parsed;
  Expect(parsed.ParseFromString(flat), "the response does not parse");
  Expect(parsed.raw_output_contents_size() == 1 && parsed.raw_output_contents(0).size() == bytes,
         "the response's output does not match its shape");
}

// The wire parser against protobuf's own parse of the same bytes.
void ExpectSameAsProtobuf(const absl::StatusOr<WireInferRequest>& wire, bool parsed,
                          const inference::ModelInferRequest& expected) {
  if (!wire.ok()) {
    Expect(!parsed || absl::IsResourceExhausted(wire.status()),
           "the wire parser refused a request protobuf parses");
    return;
  }
  Expect(parsed, "the wire parser accepted a request protobuf refuses");
  inference::ModelInferRequest actual = wire->request;
  for (const TensorMemory& raw : wire->raw_inputs) {
    actual.add_raw_input_contents(reinterpret_cast<const char*>(raw.data), raw.bytes);
  }
  Expect(CanonicalBytes(actual) == CanonicalBytes(expected),
         "the wire parser's message differs from protobuf's");
}

}  // namespace
}  // namespace convserve

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  convserve::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convserve;
  FuzzServer& server = FuzzServer::Get();
  RequestRunner* runner = &server.runner();
  absl::StatusOr<WireInferRequest> wire = ParseModelInferRequest(
      ReceivedBytes(data, size), [runner](size_t bytes) { return runner->AllocateHostBuffer(bytes); });
  inference::ModelInferRequest message;
  const bool parsed = message.ParseFromArray(data, static_cast<int>(size));
  ExpectSameAsProtobuf(wire, parsed, message);
  if (!wire.ok()) {
    CheckClientError(wire.status());
    return 0;
  }
  // The unary path: raw inputs in buffers.
  bool answered = false;
  inference::ModelInferResponse response;
  server.kserve().StartInfer(
      wire->request, &wire->raw_inputs, &response, [] { return false; },
      [&](const absl::Status& status, const TensorMemory* output) {
        answered = true;
        CheckAnswer(status, response, output);
      });
  Expect(answered, "the request was not answered on the caller's thread");
  // The streaming path: the whole message as protobuf parsed it.
  answered = false;
  inference::ModelInferResponse stream_response;
  server.kserve().StartInfer(message, &stream_response, [] { return false; },
                             [&](const absl::Status& status) {
                               answered = true;
                               CheckAnswer(status, stream_response, nullptr);
                             });
  Expect(answered, "the streamed request was not answered on the caller's thread");
  return 0;
}
