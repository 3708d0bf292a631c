// ModelInfer's bytes read and written without protobuf copying the tensors:
// the request is parsed straight from gRPC's received slices, the input
// tensor's bytes copied once into a host buffer (page-locked on GPU servers,
// so the copy to the GPU is direct DMA); the response is serialized without
// its tensor, which follows as a slice referring to the output buffer, sent
// by gRPC with no copy. See docs/runtime.md ("Host copies").
#ifndef CONVSERVE_SERVER_KSERVE_WIRE_H_
#define CONVSERVE_SERVER_KSERVE_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
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

// `response` (its raw_output_contents must be empty) and then, when
// `output` is set, raw_output_contents = output's bytes, referred to (held)
// until gRPC has sent them.
absl::StatusOr<grpc::ByteBuffer> SerializeModelInferResponse(
    const inference::ModelInferResponse& response, const TensorMemory* output);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_WIRE_H_
