// libFuzzer target: the bytes of a convserve.v1 Infer request as gRPC hands
// them to the server (in slices), read by the tensor wire parser
// (server/tensor_wire.h, which takes input.data out without protobuf copying
// it), checked against the graph it names and run by the service's request
// path on a runner that computes nothing (tests/fuzz/fuzz_server.h).
// Oracles: the wire parser accepts exactly what protobuf accepts and yields
// the same message and tensor bytes; a bad request is answered with a
// client's error code; a good one's response parses with an output of the
// size its shape says.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_server.h"

namespace convserve {
namespace {

void Expect(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "infer_request_fuzzer: %s\n", what);
  std::abort();
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  Expect(buffer.Dump(&slices).ok(), "a response does not dump");
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// The wire parser against protobuf's own parse of the same bytes.
void ExpectSameAsProtobuf(const uint8_t* data, size_t size,
                          const absl::StatusOr<WireConvServeRequest>& wire) {
  v1::InferRequest expected;
  const bool parsed = expected.ParseFromArray(data, static_cast<int>(size));
  if (!wire.ok()) {
    Expect(!parsed, "the wire parser refused a request protobuf parses");
    return;
  }
  Expect(parsed, "the wire parser accepted a request protobuf refuses");
  // Protobuf keeps the last input.data it meets; the wire parser keeps all.
  v1::InferRequest actual = wire->request;
  if (!wire->data.empty()) {
    const TensorMemory& last = wire->data.back();
    actual.mutable_input()->set_data(reinterpret_cast<const char*>(last.data), last.bytes);
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
  absl::StatusOr<WireConvServeRequest> wire = ParseInferRequest(
      ReceivedBytes(data, size), [runner](size_t bytes) { return runner->AllocateHostBuffer(bytes); });
  ExpectSameAsProtobuf(data, size, wire);
  if (!wire.ok()) {
    CheckClientError(wire.status());
    return 0;
  }
  bool answered = false;
  server.convserve().StartInfer(
      *std::move(wire), [] { return false; },
      [&answered](const absl::Status& status, grpc::ByteBuffer* bytes) {
        answered = true;
        if (!status.ok()) {
          CheckClientError(status);
          return;
        }
        Expect(bytes != nullptr, "an OK answer without a response");
        v1::InferResponse response;
        Expect(response.ParseFromString(Flatten(*bytes)), "the response does not parse");
        const Shape shape(response.output().shape().begin(), response.output().shape().end());
        const size_t element = response.output().data_type() == v1::FLOAT32 ? 4 : 2;
        Expect(response.output().data().size() == NumElements(shape) * element,
               "the response's output does not match its shape");
      });
  Expect(answered, "the request was not answered on the caller's thread");
  return 0;
}
