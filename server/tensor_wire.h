// Inference messages read and written without protobuf copying their tensor
// bytes. A request is parsed straight from gRPC's received slices, its
// tensor copied once into a host buffer (page-locked on GPU servers, so the
// copy to the GPU is direct DMA); a response is serialized without its
// tensor, which follows as a slice referring to the output buffer, sent by
// gRPC with no copy. For KServe ModelInfer (raw_input_contents,
// raw_output_contents) and convserve.v1 Infer (input.data, output.data).
// See docs/runtime.md ("Host copies").
#ifndef CONVSERVE_SERVER_TENSOR_WIRE_H_
#define CONVSERVE_SERVER_TENSOR_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"
#include "engine/runtime/infer_call.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

using HostAllocator = std::function<absl::StatusOr<TensorMemory>(size_t bytes)>;

struct WireInferRequest {
  // Every field but raw_input_contents.
  inference::ModelInferRequest request;
  // raw_input_contents, in order, each in a buffer from the allocator.
  std::vector<TensorMemory> raw_inputs;
};

// INVALID_ARGUMENT when the bytes are not a ModelInferRequest.
absl::StatusOr<WireInferRequest> ParseModelInferRequest(const grpc::ByteBuffer& bytes,
                                                        const HostAllocator& allocate);

// `response` and then, when `output` is set, raw_output_contents = output's
// bytes (the header must then hold no raw_output_contents), referred to
// (held) until gRPC has sent them.
absl::StatusOr<grpc::ByteBuffer> SerializeModelInferResponse(
    const inference::ModelInferResponse& response, const TensorMemory* output);

struct WireConvServeRequest {
  // Every field but input.data.
  v1::InferRequest request;
  // input.data in a buffer from the allocator, when the request had it.
  std::vector<TensorMemory> data;
};

// INVALID_ARGUMENT when the bytes are not a convserve.v1 InferRequest.
absl::StatusOr<WireConvServeRequest> ParseInferRequest(const grpc::ByteBuffer& bytes,
                                                       const HostAllocator& allocate);

// `response` (its output.data must be empty) with output.data = `output`'s
// bytes, referred to (held) until gRPC has sent them.
absl::StatusOr<grpc::ByteBuffer> SerializeInferResponse(const v1::InferResponse& response,
                                                        const TensorMemory& output);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_TENSOR_WIRE_H_
