#include "server/health_service.h"

#include <grpcpp/support/async_stream.h>

#include <optional>

namespace convserve {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch call: sends the status, then each change, until the client
// leaves or the service shuts down. Deleted once gRPC says it is done and no
// write or finish of it is under way.
class HealthService::Watch {
 public:
  static void Listen(HealthService* health, CallQueue queue) { new Watch(health, queue); }

  // A new status (`last`: the service shut down, the watch ends after it).
  // Called with the service's lock held, so never after Done's Remove: it
  // cannot be the watch's last step.
  void Tell(Status status, bool last) {
    absl::MutexLock lock(&mu_);
    if (known_) wanted_ = status;  // an unknown service stays SERVICE_UNKNOWN
    last_ = last_ || last;
    NextLocked();
  }

 private:
  Watch(HealthService* health, CallQueue queue)
      : live_(queue.calls), health_(health), queue_(queue), writer_(&context_) {
    context_.AsyncNotifyWhenDone(&done_);
    health_->async_.RequestWatch(&context_, &request_, &writer_, queue_.cq, queue_.cq, &arrived_);
  }

  void Arrived(bool ok) {
    if (!ok) {  // the server is shutting down: the call never started
      delete this;
      return;
    }
    Listen(health_, queue_);
    if (!request_.service().empty()) {
      absl::MutexLock lock(&mu_);
      known_ = false;
      wanted_ = HealthCheckResponse::SERVICE_UNKNOWN;
    }
    // Tells it the status (SERVICE_UNKNOWN for another name); registered
    // either way, so that every open watch ends at Shutdown.
    health_->Add(this);
  }
  void Written(bool ok) {
    bool over = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) ended_ = true;  // the call is gone
      over = NextLocked();
    }
    if (over) delete this;
  }
  void Finished(bool /*ok*/) {
    bool over = false;
    {
      absl::MutexLock lock(&mu_);
      finishing_ = false;
      over = NextLocked();
    }
    if (over) delete this;
  }
  void Done(bool /*ok*/) {
    // All of a call's events run on its queue's one thread, after Arrived.
    if (registered_) health_->Remove(this);  // no Tell after this
    bool over = false;
    {
      absl::MutexLock lock(&mu_);
      done_seen_ = true;
      ended_ = true;
      over = NextLocked();
    }
    if (over) delete this;
  }

  // Starts the next write or finish; true once nothing is under way and
  // gRPC is done with the call: then the caller deletes it.
  bool NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return false;
    if (!ended_ && !finished_ && sent_ != wanted_) {
      response_.set_status(wanted_);
      sent_ = wanted_;
      writing_ = true;
      writer_.Write(response_, &written_);
      return false;
    }
    if (!ended_ && last_ && !finished_) {
      finished_ = true;
      finishing_ = true;
      writer_.Finish(grpc::Status::OK, &finish_done_);
      return false;
    }
    return done_seen_;
  }

  LiveCalls::Hold live_;
  HealthService* const health_;
  const CallQueue queue_;
  grpc::ServerContext context_;
  HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> writer_;
  MemberTag<Watch, &Watch::Arrived> arrived_{this};
  MemberTag<Watch, &Watch::Written> written_{this};
  MemberTag<Watch, &Watch::Finished> finish_done_{this};
  MemberTag<Watch, &Watch::Done> done_{this};

  bool registered_ = false;  // with the service (set by Add, read by Done)
  absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = true;
  Status wanted_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool last_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Status> sent_ ABSL_GUARDED_BY(mu_);  // the last status written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool done_seen_ ABSL_GUARDED_BY(mu_) = false;

  friend class HealthService;
};

void HealthService::Listen(CallQueue queue) {
  methods_.push_back(ListenUnary(&async_, &grpc::health::v1::Health::AsyncService::RequestCheck,
                                 this, &HealthService::Check, queue, 2));
  Watch::Listen(this, queue);
}

void HealthService::Check(ServerCall* rpc, const HealthCheckRequest* request,
                          HealthCheckResponse* response) {
  if (!request->service().empty()) {
    rpc->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return;
  }
  response->set_status(status());
  rpc->Finish(grpc::Status::OK);
}

HealthService::Status HealthService::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  status_ = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  for (Watch* watch : watches_) watch->Tell(status_, false);
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  status_ = HealthCheckResponse::NOT_SERVING;
  for (Watch* watch : watches_) watch->Tell(status_, true);
}

void HealthService::Add(Watch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.insert(watch);
  watch->registered_ = true;
  // Under the lock, so no change can be told before this first status.
  watch->Tell(status_, shut_down_);
}

void HealthService::Remove(Watch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.erase(watch);
}

}  // namespace convserve
