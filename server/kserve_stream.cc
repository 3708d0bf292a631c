#include "server/kserve_stream.h"

#include <utility>

#include "server/grpc_status.h"
#include "server/kserve_service.h"

namespace convserve {

ModelStreamCall::ModelStreamCall(KServeAsyncService* grpc_service, KServeService* service,
                                 CallQueue queue)
    : live_(queue.calls), grpc_service_(grpc_service), service_(service), queue_(queue) {
  context_.AsyncNotifyWhenDone(&done_);
  grpc_service_->RequestModelStreamInfer(&context_, &stream_, queue_.cq, queue_.cq, &arrived_);
}

void ModelStreamCall::Arrived(bool ok) {
  if (!ok) {  // the server is shutting down: the call never started
    delete this;
    return;
  }
  Listen(grpc_service_, service_, queue_);  // the next one
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    steps = NextStepsLocked();
  }
  Take(steps);
}

void ModelStreamCall::ReadDone(bool ok) {
  std::shared_ptr<Request> request;
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    request = std::move(reading_);
    if (ok) {
      ++running_;  // counted before the lock drops, so no Finish can pass it
    } else {
      request = nullptr;
      reads_ended_ = true;  // half-closed, or the call broke (Done says which)
    }
    // The next read goes out before this request starts: it may run for long.
    steps = NextStepsLocked();
  }
  Take(steps);
  if (request == nullptr) return;
  // Safe to use `this` here: the request counted in running_ holds Finish
  // back. The `done` owns the request, so it lives until (and after) its
  // answer.
  service_->StartInfer(
      request->request, &request->response,
      [this] { return call_cancelled_.load(std::memory_order_acquire); },
      [this, request](const absl::Status& status) { Answer(request.get(), status); });
}

void ModelStreamCall::Answer(Request* request, const absl::Status& status) {
  inference::ModelStreamInferResponse response;
  if (status.ok()) {
    response.mutable_infer_response()->Swap(&request->response);
  } else {
    // As Triton: the error travels in the stream, and the response still
    // names the request so the client can match it.
    response.set_error_message(StreamErrorMessage(status));
    inference::ModelInferResponse* answer = response.mutable_infer_response();
    answer->set_id(request->request.id());
    answer->set_model_name(request->request.model_name());
    answer->set_model_version(request->request.model_version());
  }
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    --running_;
    if (!cancelled_) unwritten_.push_back(std::move(response));
    steps = NextStepsLocked();
  }
  Take(steps);  // this may be the Finish: nothing touches `this` after it
}

void ModelStreamCall::WriteDone(bool ok) {
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    unwritten_.pop_front();
    if (!ok) cancelled_ = true;  // the call is gone; Done says so too
    steps = NextStepsLocked();
  }
  Take(steps);
}

void ModelStreamCall::Done(bool /*ok*/) {
  // gRPC's done comes after the status was sent, or as soon as the call is
  // cancelled (by the client, its deadline or the server's shutdown).
  if (context_.IsCancelled()) {
    call_cancelled_.store(true, std::memory_order_release);
    Steps steps;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      steps = NextStepsLocked();
    }
    Take(steps);  // this call's own reference keeps it alive past a Finish
  }
  Release();
}

void ModelStreamCall::Finished(bool /*ok*/) { Release(); }

void ModelStreamCall::Release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last reference may be dropped on another queue thread than the one
  // that last changed the state (a WriteDone that popped the last response
  // and started the Finish; then Finished elsewhere). gRPC's completion queue
  // orders the two, but inside Debian's gRPC, which ThreadSanitizer cannot
  // see (it reported the deque's destructor racing that pop, in a CI run on
  // 2026-11-27); taking the lock once orders every change made under it
  // before the delete, for TSan too.
  { absl::MutexLock lock(&mu_); }
  delete this;
}

ModelStreamCall::Steps ModelStreamCall::NextStepsLocked() {
  Steps steps;
  if (cancelled_) {
    // Nothing more can be sent; only the front stays while gRPC writes it.
    unwritten_.erase(unwritten_.begin() + (writing_ ? 1 : 0), unwritten_.end());
  }
  const int pending = running_ + static_cast<int>(unwritten_.size());
  if (reading_ == nullptr && !reads_ended_ && !cancelled_ && pending < kMaxPending) {
    reading_ = std::make_shared<Request>();
    steps.read = &reading_->request;
  }
  if (!writing_ && !unwritten_.empty() && !cancelled_) {
    writing_ = true;
    steps.write = &unwritten_.front();
  }
  // An outstanding read ends (ok=false) on cancellation, so a cancelled call
  // gets here too; a read held back by kMaxPending is not outstanding.
  if (!finished_ && reading_ == nullptr && !writing_ && running_ == 0 && unwritten_.empty() &&
      (reads_ended_ || cancelled_)) {
    finished_ = true;
    steps.finish = cancelled_
                       ? grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled")
                       : grpc::Status::OK;
  }
  return steps;
}

void ModelStreamCall::Take(const Steps& steps) {
  if (steps.read != nullptr) stream_.Read(steps.read, &read_done_);
  if (steps.write != nullptr) stream_.Write(*steps.write, &write_done_);
  if (steps.finish.has_value()) stream_.Finish(*steps.finish, &finished_tag_);
}

}  // namespace convserve
