// The one inference request a client run repeats and the calls that send it
// (blocking, or on gRPC's callback API for the load generator). One
// interface, InferRequestSender, with the transports behind it: convserve.v1
// Infer (here) and KServe ModelInfer with tensors in the messages or in
// shared memory, unary or streamed (kserve_request_sender.h).
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
#include "engine/live_calls.h"
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

// Where a response's tensor waits until someone reads it: a slot of a
// shared-memory region, which no other request uses while this object lives
// (destroying it frees the slot), or the received KServe response's bytes
// (model_infer_bytes.h).
class OutputSlot {
 public:
  virtual ~OutputSlot() = default;
  // Copies the slot's first `bytes` bytes into `out`.
  virtual absl::Status Read(int64_t bytes, std::string* out) const = 0;
};

// One response's tensor. convserve.v1 and KServe streams deliver its bytes
// with the response; unary KServe calls leave them in the output's slot (a
// shared-memory region or the received message), so a response costs no
// copy unless someone asks for the bytes (FetchBytes).
struct InferOutput {
  // Logical dims for convserve.v1, byte-order dims for KServe (as sent).
  std::vector<int64_t> shape;
  // Size of the tensor.
  int64_t byte_size = 0;
  // The tensor: set on arrival, or by FetchBytes when it waits in a slot.
  std::string bytes;
  // The slot holding the tensor; null when `bytes` came set.
  std::unique_ptr<OutputSlot> slot;

  // Makes `bytes` hold the tensor, reading it out of the slot the first
  // time; nothing to do when it came in the response.
  absl::Status FetchBytes();
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
  // when it is OK, the output (otherwise nullptr). `done` may move the output
  // away; its slot, if any, is freed when the output is destroyed. The
  // deadline is the client's timeout from now.
  using Done = std::function<void(const absl::Status& status, InferOutput* output)>;
  virtual void SendAsync(ConvServeClient& client, Done done) = 0;

  // As SendAsync, but `done` has run when it returns. Unary senders make
  // the call on the calling thread with gRPC's blocking API, which saves the
  // hand-off of each completion to a gRPC thread (an empty round trip took
  // 0.126 ms so against 0.253 ms through the callback API, H100 host); the
  // default sends with SendAsync and waits. A shared-memory sender may wait
  // for a free output slot first.
  virtual void SendBlocking(ConvServeClient& client, Done done);

  // SendBlocking's output or error. Do not hold on to more outputs than a
  // shared-memory sender has slots.
  absl::StatusOr<InferOutput> Send(ConvServeClient& client);

  virtual Protocol protocol() const = 0;
  // How requests and tensors travel, for reports: e.g. "unary ModelInfer,
  // tensors in system shared memory (4 output slots)".
  virtual std::string transport() const = 0;
};

// convserve.v1 Infer: unary calls, tensors in the messages.
std::unique_ptr<InferRequestSender> ConvServeRequestSender(const InferInput& input);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_INFER_REQUEST_SENDER_H_
