// KServe ModelInfer with the tensors in the messages, without the client's
// own copies of them (docs/runtime.md, "Host copies per request"). Through
// the generated stub each call serializes the request, input included, into
// a fresh buffer, and the response's parse copies the output out of the
// received slices: two passes over every tensor beside the kernel's socket
// copies. Here the request is serialized once and every call sends the same
// bytes, and a response is parsed around its output, which stays in the
// received slices until someone reads it.
#ifndef CONVSERVE_CLIENT_MODEL_INFER_BYTES_H_
#define CONVSERVE_CLIENT_MODEL_INFER_BYTES_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

// A ModelInferRequest serialized once.
class SerializedModelInferRequest {
 public:
  explicit SerializedModelInferRequest(const inference::ModelInferRequest& request);

  // A buffer over the serialized bytes, not a copy of them: it must not
  // outlive this object (gRPC sends straight from it).
  grpc::ByteBuffer Buffer() const;
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

// A ModelInferResponse as received: every field but raw_output_contents
// parsed into `header`, and where each raw_output_contents entry lies in
// `buffer`, which holds the received slices (no copy of them).
struct ModelInferResponseBytes {
  struct Range {
    size_t offset = 0;
    size_t size = 0;
  };
  inference::ModelInferResponse header;  // its raw_output_contents empty
  std::vector<Range> raw_output_contents;
  grpc::ByteBuffer buffer;
};

// Parses `received` (taken over). INVALID_ARGUMENT when it is not a
// well-formed ModelInferResponse.
absl::StatusOr<ModelInferResponseBytes> ParseModelInferResponseBytes(grpc::ByteBuffer received);

// Copies `range` of `buffer` into `out` (replacing its contents).
// OUT_OF_RANGE when the buffer is shorter.
absl::Status CopyByteBufferRange(const grpc::ByteBuffer& buffer,
                                 ModelInferResponseBytes::Range range, std::string* out);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_MODEL_INFER_BYTES_H_
