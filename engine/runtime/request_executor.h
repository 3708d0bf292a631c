// Runs accepted requests on a fixed set of worker threads so gRPC's threads
// never do inference work. The queue is bounded: a full queue rejects at once
// (the caller answers RESOURCE_EXHAUSTED) instead of growing latency without
// limit. Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_REQUEST_EXECUTOR_H_
#define CONVSERVE_ENGINE_RUNTIME_REQUEST_EXECUTOR_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace convserve {

struct RequestExecutorOptions {
  // Worker threads.
  int threads = 2;
  // Requests waiting for a worker before new ones are rejected.
  int max_queued = 256;
  // Name of the worker threads (engine/thread_name.h), numbered from 0.
  std::string thread_name = "cs-request";
};

class RequestExecutor {
 public:
  explicit RequestExecutor(const RequestExecutorOptions& options);
  // Runs what was accepted, then joins the workers.
  ~RequestExecutor();

  RequestExecutor(const RequestExecutor&) = delete;
  RequestExecutor& operator=(const RequestExecutor&) = delete;

  // Queues `task`. RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // after Drain(); `task` is not run then.
  absl::Status Submit(std::function<void()> task);

  // Stops accepting and returns once every accepted task has run and what
  // it held is gone.
  void Drain();

  // Tasks queued or running.
  int pending() const;
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void WorkerLoop();

  const RequestExecutorOptions options_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_REQUEST_EXECUTOR_H_
