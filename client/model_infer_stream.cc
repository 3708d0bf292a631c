#include "client/model_infer_stream.h"

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

// How often requests past their deadline are failed.
constexpr absl::Duration kExpiryPeriod = absl::Milliseconds(100);
// How long the destructor lets a server finish a half-closed stream.
constexpr absl::Duration kCloseWait = absl::Seconds(5);

}  // namespace

absl::Status StreamErrorStatus(const std::string& error_message) {
  for (int code = 1; code <= 16; ++code) {
    const std::string prefix =
        absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ": ");
    if (absl::StartsWith(error_message, prefix)) {
      return absl::Status(static_cast<absl::StatusCode>(code),
                          error_message.substr(prefix.size()));
    }
  }
  return absl::UnknownError(error_message);
}

// One ModelStreamInfer call. Sends come from outside gRPC's reactions, so the
// call holds a hold (AddHold) until no more operation can start: after the
// stream ended or was half-closed, with no write being started. Every
// decision is made under mu_ and carried out after it is released (a gRPC
// operation may run its reaction on the calling thread). Its owner,
// ModelInferStream, holds it until OnDone has finished (done()) and lets it
// go on the owner's own threads: the call never ends its own life on a gRPC
// thread, where destroying the ClientContext could drop the last reference
// to the channel and shut gRPC's callback threads down from one of them
// (a double free of their completion queue, seen under AddressSanitizer).
class ModelInferStream::Call final
    : public grpc::ClientBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  static std::shared_ptr<Call> Start(ConvServeClient* client) {
    std::shared_ptr<Call> call(new Call);
    client->ModelStreamInfer(&call->context_, call.get());
    call->AddHold();
    call->StartRead(&call->incoming_);
    call->StartCall();
    return call;
  }

  // Queues the request. A call that has ended but not finished still takes
  // it (OnDone fails it with the call's status: a server without streaming
  // ends a call at once). Refused, with `done` untouched and the reason in
  // `refused`, once OnDone has begun or the call is closing.
  bool Send(const inference::ModelInferRequest* request, std::string id, absl::Time deadline,
            Done* done, absl::Status* refused) {
    Steps steps;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_ || closing_) {
        *refused = final_status_;
        return false;
      }
      waiting_[id] = Waiting{deadline, std::move(*done)};
      unwritten_.push_back(Outgoing{request, std::move(id)});
      steps = NextStepsLocked();
    }
    Take(steps);
    return true;
  }

  void ExpireBefore(absl::Time now) {
    std::vector<Done> expired;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        expired.push_back(std::move(it->second.done));
        it = waiting_.erase(it);
      }
    }
    for (Done& done : expired) {
      done(absl::DeadlineExceededError(
               "no answer on the ModelStreamInfer stream within the deadline (--timeout)"),
           nullptr);
    }
  }

  // Half-closes the stream once what is queued is written.
  void Close() {
    Steps steps;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      steps = NextStepsLocked();
    }
    Take(steps);
  }

  // Waits for OnDone; after `wait`, cancels the call and waits on.
  void AwaitDone(absl::Duration wait) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&done_), wait)) return;
    }
    context_.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

  bool ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Steps steps;
      {
        absl::MutexLock lock(&mu_);
        ended_ = true;  // no more answers can come
        steps = NextStepsLocked();
      }
      Take(steps);
      return;
    }
    inference::ModelStreamInferResponse response;
    response.Swap(&incoming_);
    Done done;
    {
      absl::MutexLock lock(&mu_);
      auto it = waiting_.find(response.infer_response().id());
      // Not found: the request expired, its answer is dropped.
      if (it != waiting_.end()) {
        done = std::move(it->second.done);
        waiting_.erase(it);
      }
    }
    StartRead(&incoming_);
    if (!done) return;
    if (!response.error_message().empty()) {
      done(StreamErrorStatus(response.error_message()), nullptr);
      return;
    }
    done(absl::OkStatus(), response.mutable_infer_response());
  }

  void OnWriteDone(bool ok) override {
    Steps steps;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) ended_ = true;  // the call is broken
      steps = NextStepsLocked();
    }
    Take(steps);
  }

  void OnWritesDoneDone(bool) override {
    Steps steps;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      steps = NextStepsLocked();
    }
    Take(steps);
  }

  void OnDone(const grpc::Status& status) override {
    // gRPC touches neither the reactor nor the context after this; the
    // owner may destroy both once done_ is set, below.
    absl::Status why = FromGrpcStatus(status);
    if (status.ok()) {
      why = absl::UnavailableError(
          "the server ended the ModelStreamInfer stream without answering every request");
    } else if (why.code() == absl::StatusCode::kUnimplemented && why.message().empty()) {
      // gRPC's answer for a method the server does not have says nothing.
      why = absl::UnimplementedError("the server does not serve ModelStreamInfer");
    }
    std::vector<Done> failed;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      finishing_ = true;  // Send refuses from here on: nothing is added to waiting_
      final_status_ = why;
      for (auto& [id, waiting] : waiting_) failed.push_back(std::move(waiting.done));
      waiting_.clear();
      unwritten_.clear();
    }
    for (Done& done : failed) done(why, nullptr);
    // Only now: the owner may go once it sees done_, and the `done`s above
    // may use it. Nothing touches `this` after the lock is released.
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  struct Outgoing {
    const inference::ModelInferRequest* request;
    std::string id;
  };
  struct Waiting {
    absl::Time deadline;
    Done done;
  };
  struct Steps {
    const inference::ModelInferRequest* write = nullptr;
    bool writes_done = false;
    bool remove_hold = false;
  };

  Call() = default;

  Steps NextStepsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Steps steps;
    if (!writing_ && !ended_) {
      // Requests that expired before their turn are not written at all.
      while (!unwritten_.empty() && waiting_.count(unwritten_.front().id) == 0) {
        unwritten_.pop_front();
      }
      if (!unwritten_.empty()) {
        Outgoing next = std::move(unwritten_.front());
        unwritten_.pop_front();
        // One copy per change of request (a caller reuses a few).
        if (outgoing_from_ != next.request) {
          outgoing_ = *next.request;
          outgoing_from_ = next.request;
        }
        outgoing_.set_id(next.id);
        writing_ = true;
        steps.write = &outgoing_;
      } else if (closing_ && !writes_done_) {
        writes_done_ = true;
        writing_ = true;
        steps.writes_done = true;
      }
    }
    if (!hold_removed_ && !writing_ && (ended_ || writes_done_)) {
      hold_removed_ = true;
      steps.remove_hold = true;
    }
    return steps;
  }

  void Take(const Steps& steps) {
    if (steps.write != nullptr) StartWrite(steps.write);
    if (steps.writes_done) StartWritesDone();
    if (steps.remove_hold) RemoveHold();
  }

  grpc::ClientContext context_;
  // Filled by the outstanding read; only reactions touch it.
  inference::ModelStreamInferResponse incoming_;

  absl::Mutex mu_;
  std::deque<Outgoing> unwritten_ ABSL_GUARDED_BY(mu_);
  // Requests written or queued, by id, until answered, expired or failed.
  std::unordered_map<std::string, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  // The message being written (gRPC needs it until OnWriteDone), and the
  // request it is a copy of.
  inference::ModelInferRequest outgoing_ ABSL_GUARDED_BY(mu_);
  const inference::ModelInferRequest* outgoing_from_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A write or the half-close is started or about to be.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  // No more writes or answers: the read failed, a write failed, or OnDone.
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_removed_ ABSL_GUARDED_BY(mu_) = false;
  // OnDone has begun, with this status for what the call still carried.
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("closing");
  // OnDone has failed everything: the owner may go.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

ModelInferStream::ModelInferStream(ConvServeClient* client)
    : client_(client), expirer_([this] { ExpireLoop(); }) {}

ModelInferStream::~ModelInferStream() {
  std::vector<std::shared_ptr<Call>> calls;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    calls.swap(calls_);
    current_ = nullptr;
  }
  expirer_.join();
  for (const auto& call : calls) call->Close();
  for (const auto& call : calls) call->AwaitDone(kCloseWait);
}

void ModelInferStream::Send(const inference::ModelInferRequest* request, std::string id,
                            absl::Time deadline, Done done) {
  // A finished call refuses; the second try is on a fresh one, and if that
  // one finished already too, its status is the request's.
  absl::Status refused;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Call> call;
    {
      absl::MutexLock lock(&mu_);
      if (current_ == nullptr || current_->ended()) {
        calls_.erase(std::remove_if(calls_.begin(), calls_.end(),
                                    [](const std::shared_ptr<Call>& c) { return c->done(); }),
                     calls_.end());
        current_ = Call::Start(client_);
        calls_.push_back(current_);
      }
      call = current_;
    }
    if (call->Send(request, id, deadline, &done, &refused)) return;
  }
  done(refused, nullptr);
}

void ModelInferStream::ExpireLoop() {
  for (;;) {
    std::vector<std::shared_ptr<Call>> calls;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kExpiryPeriod);
      if (stopping_) return;
      calls = calls_;
    }
    const absl::Time now = absl::Now();
    for (const auto& call : calls) call->ExpireBefore(now);
  }
}

}  // namespace convserve
