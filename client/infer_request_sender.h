// The one inference request a client run repeats, prebuilt for either wire
// protocol, and the calls that send it (blocking, or on gRPC's callback API
// for the load generator). Thread-safe: the messages are read-only once built.
#ifndef CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_
#define CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/convserve_client.h"
#include "convserve/v1/convserve.pb.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

enum class Protocol {
  kConvServe,  // convserve.v1.ConvServe/Infer
  kKServe,     // inference.GRPCInferenceService/ModelInfer
};

// "convserve" or "kserve"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Protocol> ParseProtocol(const std::string& name);
const char* ProtocolName(Protocol protocol);

// What every request of a run carries.
struct InferInput {
  // Graph name or id as the requests name it.
  std::string graph;
  // The graph's definition (weights not needed): name, data type, layout.
  v1::GraphDef definition;
  // Logical N, C, (D,) H, W.
  std::vector<int64_t> shape;
  // Exactly the input tensor's bytes in the graph's data type and layout.
  std::string bytes;
};

// One response's tensor.
struct InferOutput {
  // Logical dims for convserve.v1, byte-order dims for KServe (as sent).
  std::vector<int64_t> shape;
  std::string bytes;
};

// Logical N, C, ... -> dims in byte order (N, ..., C for channels-last), as
// KServe expects.
std::vector<int64_t> PhysicalDims(const std::vector<int64_t>& logical, v1::Layout layout);

class InferRequestSender {
 public:
  InferRequestSender(Protocol protocol, const InferInput& input);

  // Blocking call with the client's deadline.
  absl::StatusOr<InferOutput> Send(ConvServeClient& client) const;

  // Non-blocking: `done` runs once on a gRPC thread with the call's status
  // and, when it is OK, the output (otherwise nullptr). The deadline is the
  // client's timeout from now.
  using Done = std::function<void(const absl::Status& status, InferOutput* output)>;
  void SendAsync(ConvServeClient& client, Done done) const;

  Protocol protocol() const { return protocol_; }

 private:
  const Protocol protocol_;
  v1::InferRequest convserve_request_;
  inference::ModelInferRequest kserve_request_;
};

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_
