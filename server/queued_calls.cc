#include "server/queued_calls.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/thread_name.h"
#include "server/grpc_status.h"
#include "spdlog/spdlog.h"

namespace convserve {

void FinishCall(ServerCall* call, const absl::Status& status) {
  call->Finish(ToGrpcStatus(status));
}

void QueueThreads::Start() {
  if (started_) return;
  started_ = true;
  for (int i = 0; i < thread_count_; ++i) {
    grpc::ServerCompletionQueue* const queue = queues_[i % queues_.size()].get();
    threads_.emplace_back([queue, i] {
      NameThisThread(absl::StrCat("cs-grpc", i));
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) static_cast<QueueTag*>(tag)->Proceed(ok);
    });
  }
}

void QueueThreads::Stop() {
  if (stopped_.exchange(true)) return;
  Start();  // the calls' last events must run
  // Every call cut off by the server's shutdown ends within moments; a
  // handler that never finishes its call holds the shutdown here.
  int64_t left = 0;
  while (!calls_.AwaitNoneFor(absl::Seconds(10), &left)) {
    spdlog::warn("shutdown: waiting for {} gRPC calls to end", left);
  }
  for (auto& queue : queues_) queue->Shutdown();
  for (std::thread& thread : threads_) thread.join();
}

}  // namespace convserve
