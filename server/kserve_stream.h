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

#include <grpcpp/completion_queue.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/async_stream.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/kserve_service.h"
#include "server/queued_calls.h"

namespace convserve {

// One ModelStreamInfer call on a completion queue (server/queued_calls.h).
// Asked for by Listen, deleted by itself once gRPC has both finished it and
// said it is done; Finish is started only once every started request's
// `done` has run, so no `done` ever touches a deleted call. Events and
// `done`s may run concurrently on any thread; all state is under mu_.
class ModelStreamCall final {
 public:
  // Requests read but not yet answered on the wire (running, or waiting for
  // their response to be written). At this many the stream stops reading
  // until a response has been written, so a client that sends faster than it
  // reads is held back by gRPC flow control instead of growing server memory.
  static constexpr int kMaxPending = 128;

  // Asks for the next ModelStreamInfer call on `queue`; `service` runs its
  // requests and outlives every call.
  static void Listen(KServeAsyncService* grpc_service, KServeService* service, CallQueue queue) {
    new ModelStreamCall(grpc_service, service, queue);
  }

 private:
  // One request of the stream and its unary answer. Shared by the read that
  // fills it and the `done` that answers it, so it lives until its `done`.
  struct Request {
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
  };

  // What the state allows next, decided under mu_ and started after it is
  // released.
  struct Steps {
    inference::ModelInferRequest* read = nullptr;
    const inference::ModelStreamInferResponse* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  ModelStreamCall(KServeAsyncService* grpc_service, KServeService* service, CallQueue queue);

  // The queue's events.
  void Arrived(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void Finished(bool ok);
  void Done(bool ok);
  // Two events end a started call: its Finish and gRPC's done.
  void Release();

  // `done` of one request: queues its response.
  void Answer(Request* request, const absl::Status& status);
  // Marks the chosen steps as under way. Finish is chosen only when nothing
  // is outstanding: no read, no write, no request running.
  Steps NextStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts `steps`; after a Finish the call may be gone at any moment, so
  // nothing may touch it after this returns one.
  void Take(const Steps& steps);

  LiveCalls::Hold live_;
  KServeAsyncService* const grpc_service_;
  KServeService* const service_;
  const CallQueue queue_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>
      stream_{&context_};
  // The client cancelled or the deadline passed (read by running requests).
  std::atomic<bool> call_cancelled_{false};
  std::atomic<int> refs_{2};
  MemberTag<ModelStreamCall, &ModelStreamCall::Arrived> arrived_{this};
  MemberTag<ModelStreamCall, &ModelStreamCall::ReadDone> read_done_{this};
  MemberTag<ModelStreamCall, &ModelStreamCall::WriteDone> write_done_{this};
  MemberTag<ModelStreamCall, &ModelStreamCall::Finished> finished_tag_{this};
  MemberTag<ModelStreamCall, &ModelStreamCall::Done> done_{this};

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
