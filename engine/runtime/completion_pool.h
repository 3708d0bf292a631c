// Threads that answer requests for the GPU workers. Answering a request
// (its metrics, its response message, and gRPC's write of it when the
// server's callback finishes the call on the answering thread) took about
// a fifth of a server's CPU time at 64 requests in flight, and a GPU
// worker answering is a worker not feeding its GPU. So a worker that finds
// more requests waiting hands its answers here and takes the next request;
// with nothing waiting it answers at once, which is sooner than waking a
// thread. docs/runtime.md, "Request path".
//
// Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_COMPLETION_POOL_H_
#define CONVSERVE_ENGINE_RUNTIME_COMPLETION_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace convserve {

class CompletionPool {
 public:
  // `threads` >= 1.
  explicit CompletionPool(int threads);
  // Runs everything posted, then joins the threads.
  ~CompletionPool();

  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  // Runs `work` on one of the threads, in posting order among those free.
  void Post(std::function<void()> work);
  // Returns once nothing posted is waiting or running.
  void AwaitIdle();

  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_COMPLETION_POOL_H_
