// KServe ModelStreamInfer to one server: ModelInfer requests written one
// after another on one bidirectional stream, any number in flight, each
// response matched to its request by id (the server answers in completion
// order). A failed request comes back as a response with error_message; a
// Triton-style "CODE: message" (convserve's form) keeps its code, anything
// else reads as UNKNOWN. The stream has no per-message deadline, so a request
// not answered by its own fails DEADLINE_EXCEEDED here (its answer, if it
// comes, is dropped). A stream that ends fails what it still carries with
// the stream's status (UNIMPLEMENTED from a server without streaming), and
// the next request opens a new stream. Thread-safe.
#ifndef CONVSERVE_CLIENT_MODEL_INFER_STREAM_H_
#define CONVSERVE_CLIENT_MODEL_INFER_STREAM_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/convserve_client.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

class ModelInferStream {
 public:
  // `done` runs once, on a gRPC thread or the expiry thread, never with a
  // lock of the stream held (it may Send again): with the request's status
  // and, when OK, its response (valid during the call).
  using Done =
      std::function<void(const absl::Status& status, inference::ModelInferResponse* response)>;

  // `client` outlives the stream. No call starts before the first Send.
  explicit ModelInferStream(ConvServeClient* client);
  // Half-closes the stream and waits for the server to finish it (a few
  // seconds at most, then cancels); requests still in it fail.
  ~ModelInferStream();

  ModelInferStream(const ModelInferStream&) = delete;
  ModelInferStream& operator=(const ModelInferStream&) = delete;

  // Sends `*request` with its id replaced by `id` (unique among the requests
  // in flight). `request` must stay alive and unchanged until `done` runs.
  void Send(const inference::ModelInferRequest* request, std::string id, absl::Time deadline,
            Done done);

 private:
  class Call;

  // Fails requests past their deadline, until the destructor stops it.
  void ExpireLoop();

  ConvServeClient* const client_;  // outlives the stream (constructor contract)
  absl::Mutex mu_;
  // The call new requests go to; null before the first Send.
  std::shared_ptr<Call> current_ ABSL_GUARDED_BY(mu_);
  // Every call until its OnDone has finished (done()): the only references
  // that keep a call alive, so a call is destroyed on this object's threads
  // (Send's callers, the expiry thread, the destructor), never in OnDone.
  std::vector<std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread expirer_;
};

// A stream response's error_message as a status: "NOT_FOUND: model ..." ->
// NOT_FOUND with the rest as message; without a known code prefix, UNKNOWN
// with the whole text.
absl::Status StreamErrorStatus(const std::string& error_message);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_MODEL_INFER_STREAM_H_
