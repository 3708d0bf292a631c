// KServe ModelInfer in every form convserve-load measures: tensors in the
// messages or in shared memory (system or CUDA; shared_memory_tensors.h), and
// unary calls or one ModelStreamInfer stream per connection
// (model_infer_stream.h). The closed and open loops see only
// InferRequestSender.
//
// With shared memory every request needs an output slot of its own. A
// request that finds none free waits for one in a queue (it is sent when a
// response's output is released, its deadline counting from SendAsync), so
// SendAsync never blocks; in a closed loop with a slot per request in flight
// the wait is only the rest of the previous response's callback.
#ifndef CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_
#define CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/infer_request_sender.h"
#include "client/model_infer_bytes.h"
#include "client/model_infer_stream.h"
#include "client/shared_memory_tensors.h"

namespace convserve {

struct KServeSenderOptions {
  // Where the tensors travel.
  SharedMemoryKind shared_memory = SharedMemoryKind::kNone;
  // --shared_memory=cuda: the GPU holding the regions.
  int cuda_device = 0;
  // With shared memory: output slots, the most requests in flight at once.
  int output_slots = 1;
  // One ModelStreamInfer stream per caller client (connection) instead of
  // unary calls.
  bool streaming = false;
  // Deadline of each request.
  std::chrono::milliseconds timeout{30000};
};

class KServeRequestSender final : public InferRequestSender {
 public:
  // `callers` are the clients requests go to (SendAsync's `client` is one of
  // them), `servers` one client per server for registering shared memory;
  // both outlive the sender. Setup errors (memory, registration) name what
  // to change.
  static absl::StatusOr<std::unique_ptr<KServeRequestSender>> Create(
      const KServeSenderOptions& options, const InferInput& input,
      const std::vector<ConvServeClient*>& callers, const std::vector<ConvServeClient*>& servers);
  // Closes the streams, then unregisters and frees shared memory. Every
  // output this sender delivered must be gone by then.
  ~KServeRequestSender() override;

  void SendAsync(ConvServeClient& client, Done done) override;
  // Unary: a blocking ModelInfer on the calling thread, after waiting (up to
  // the deadline) for a free output slot. Streaming: SendAsync and a wait.
  void SendBlocking(ConvServeClient& client, Done done) override;
  Protocol protocol() const override { return Protocol::kKServe; }
  std::string transport() const override;
  // Null without shared memory.
  const SharedMemoryTensors* regions() const { return regions_.get(); }

 private:
  class Slot;
  // A request waiting for an output slot.
  struct Waiting {
    ConvServeClient* client;
    absl::Time deadline;
    Done done;
  };
  using CallDone =
      std::function<void(const absl::Status& status, inference::ModelInferResponse* response)>;

  KServeRequestSender(const KServeSenderOptions& options, const InferInput& input,
                      std::unique_ptr<SharedMemoryTensors> regions);

  // Sends the request of `slot` (-1: tensors in the message) unary or on
  // the client's stream; `blocking` (unary only): on this thread, `done`
  // run before it returns.
  void Call(ConvServeClient& client, int slot, absl::Time deadline, bool blocking,
            CallDone done);
  // Unary with the tensors in the messages: sends message_bytes_ and leaves
  // the output in the received bytes (model_infer_bytes.h).
  void SendBytes(ConvServeClient& client, absl::Time deadline, bool blocking, Done done);
  // Sends with output slot `slot` (-1 without shared memory) and turns the
  // response into an InferOutput for `done`.
  void Dispatch(ConvServeClient& client, int slot, absl::Time deadline, bool blocking, Done done);
  bool SlotFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_slots_.empty(); }
  // Gives the slot to the next waiting request, or back to the free list.
  void ReleaseSlot(int slot);

  const KServeSenderOptions options_;
  const v1::DataType data_type_;
  // Without shared memory: the one request every call sends, read-only;
  // serialized once for unary calls, a message for the stream.
  std::unique_ptr<SerializedModelInferRequest> message_bytes_;
  inference::ModelInferRequest message_request_;
  // With shared memory: the regions, and per output slot its request.
  const std::unique_ptr<SharedMemoryTensors> regions_;
  std::vector<inference::ModelInferRequest> slot_requests_;
  // With streaming: one stream per caller client. Declared after the
  // regions: the streams close first.
  std::map<ConvServeClient*, std::unique_ptr<ModelInferStream>> streams_;
  // Request ids on streams.
  std::atomic<uint64_t> next_id_{0};

  // Unary calls not yet destroyed (the destructor waits for them).
  LiveCalls live_calls_;

  absl::Mutex mu_;
  std::vector<int> free_slots_ ABSL_GUARDED_BY(mu_);
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
};

// Bytes of the graph's output for a logical input shape (the output slots'
// size). INVALID_ARGUMENT when the shape does not fit the graph.
absl::StatusOr<int64_t> OutputTensorBytes(const v1::GraphDef& graph,
                                          const std::vector<int64_t>& input_shape);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_KSERVE_REQUEST_SENDER_H_
