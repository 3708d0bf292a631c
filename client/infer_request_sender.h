// The one inference request a client run repeats and the calls that send it
// (blocking, or on gRPC's callback API for the load generator). One
// interface, InferRequestSender, with the transports behind it: convserve.v1
// Infer (here) and KServe ModelInfer, unary or streamed
// (kserve_request_sender.h).
#ifndef CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_
#define CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_

#include <cstdint>
#include <functional>
#include <memory>
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

// Sends the run's request. Thread-safe.
class InferRequestSender {
 public:
  virtual ~InferRequestSender() = default;

  // Non-blocking: `done` runs once, on a gRPC thread or (when the request
  // fails before it is sent) on the caller's, with the call's status and,
  // when it is OK, the output (otherwise nullptr), which `done` may move
  // away. The deadline is the client's timeout from now.
  using Done = std::function<void(const absl::Status& status, InferOutput* output)>;
  virtual void SendAsync(ConvServeClient& client, Done done) = 0;

  // Blocking SendAsync.
  absl::StatusOr<InferOutput> Send(ConvServeClient& client);

  virtual Protocol protocol() const = 0;
  // How requests and tensors travel, for reports: e.g. "unary ModelInfer,
  // tensors in the messages".
  virtual std::string transport() const = 0;
};

// convserve.v1 Infer: unary calls, tensors in the messages.
std::unique_ptr<InferRequestSender> ConvServeRequestSender(const InferInput& input);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_
