// KServe ModelStreamInfer as Triton serves it: one bidirectional stream
// carries many ModelInfer requests, several in flight at once. Each request
// gets exactly one ModelStreamInferResponse, written when it completes
// (completion order; clients match `infer_response.id`). A failed request
// gets `error_message` ("CODE: message", see StreamErrorMessage in
// server/grpc_status.h) and the stream goes on; the call itself ends OK once
// the client has half-closed and every request is answered. Requests arriving
// while the server drains are refused one by one (UNAVAILABLE), like unary
// ones.
#ifndef CONVSERVE_SERVER_KSERVE_STREAM_H_
#define CONVSERVE_SERVER_KSERVE_STREAM_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

class KServeService;

// One ModelStreamInfer call. Created by KServeService::ModelStreamInfer and
// deleted by its own OnDone; gRPC calls OnDone only after Finish, and Finish
// is called only once every started request's `done` has run, so no `done`
// ever touches a deleted reactor. Reactions and `done`s may run concurrently
// on any thread; all state is under mu_.
class ModelStreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // Requests read but not yet answered on the wire (running, or waiting for
  // their response to be written). At this many the stream stops reading
  // until a response has been written, so a client that sends faster than it
  // reads is held back by gRPC flow control instead of growing server memory.
  static constexpr int kMaxPending = 128;

  // `context` is the call's (gRPC keeps it until OnDone); `service` outlives
  // every call. Starts reading.
  ModelStreamReactor(grpc::CallbackServerContext* context, KServeService* service);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // One request of the stream and its unary answer. Shared by the read that
  // fills it and the `done` that answers it, so it lives until its `done`.
  struct Request {
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
  };

  // What the state allows next, decided under mu_ and started after it is
  // released (a gRPC operation may run its reaction on this thread).
  struct Steps {
    inference::ModelInferRequest* read = nullptr;
    const inference::ModelStreamInferResponse* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // `done` of one request: queues its response.
  void Answer(Request* request, const absl::Status& status);
  // Marks the chosen steps as under way. Finish is chosen only when nothing
  // is outstanding: no read, no write, no request running.
  Steps NextStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts `steps`; after a Finish the reactor may be gone at any moment, so
  // nothing may touch it after this returns one.
  void Take(const Steps& steps);

  grpc::CallbackServerContext* const context_;
  KServeService* const service_;

  absl::Mutex mu_;
  // The request the outstanding read fills (null when no read is under way).
  std::shared_ptr<Request> reading_ ABSL_GUARDED_BY(mu_);
  // The client half-closed, or the call broke: no more reads.
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  // The client cancelled, the server cut the call off, or a write failed:
  // nothing more can be sent, unwritten responses are dropped.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Requests started whose `done` has not run.
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // Responses in completion order; the front is being written while
  // `writing_` (std::deque keeps it in place as others are added).
  std::deque<inference::ModelStreamInferResponse> unwritten_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_STREAM_H_
