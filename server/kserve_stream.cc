#include "server/kserve_stream.h"

#include <utility>

#include "server/grpc_status.h"
#include "server/kserve_service.h"

namespace convserve {

ModelStreamReactor::ModelStreamReactor(grpc::CallbackServerContext* context, KServeService* service)
    : context_(context), service_(service) {
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    steps = NextStepsLocked();
  }
  Take(steps);
}

void ModelStreamReactor::OnReadDone(bool ok) {
  std::shared_ptr<Request> request;
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    request = std::move(reading_);
    if (ok) {
      ++running_;  // counted before the lock drops, so no Finish can pass it
    } else {
      request = nullptr;
      reads_ended_ = true;  // half-closed, or the call broke (OnCancel says which)
    }
    // The next read goes out before this request starts: it may run for long.
    steps = NextStepsLocked();
  }
  Take(steps);
  if (request == nullptr) return;
  // Safe to use `this` here: OnDone cannot run before this reaction returns.
  // The `done` owns the request, so it lives until (and after) its answer.
  service_->StartInfer(
      request->request, &request->response, [context = context_] { return context->IsCancelled(); },
      [this, request](const absl::Status& status) { Answer(request.get(), status); });
}

void ModelStreamReactor::Answer(Request* request, const absl::Status& status) {
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

void ModelStreamReactor::OnWriteDone(bool ok) {
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    unwritten_.pop_front();
    if (!ok) cancelled_ = true;  // the call is gone; OnCancel may come too
    steps = NextStepsLocked();
  }
  Take(steps);
}

void ModelStreamReactor::OnCancel() {
  Steps steps;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    steps = NextStepsLocked();
  }
  Take(steps);
}

void ModelStreamReactor::OnDone() { delete this; }

ModelStreamReactor::Steps ModelStreamReactor::NextStepsLocked() {
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

void ModelStreamReactor::Take(const Steps& steps) {
  if (steps.read != nullptr) StartRead(steps.read);
  if (steps.write != nullptr) StartWrite(steps.write);
  if (steps.finish.has_value()) Finish(*steps.finish);
}

}  // namespace convserve
