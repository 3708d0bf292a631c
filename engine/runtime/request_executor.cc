#include "engine/runtime/request_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/thread_name.h"

namespace convserve {

RequestExecutor::RequestExecutor(const RequestExecutorOptions& options) : options_(options) {
  for (int i = 0; i < std::max(options.threads, 1); ++i) {
    workers_.emplace_back([this, i] {
      NameThisThread(absl::StrCat(options_.thread_name, i));
      WorkerLoop();
    });
  }
}

RequestExecutor::~RequestExecutor() {
  Drain();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

absl::Status RequestExecutor::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.max_queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the request queue is full (", options_.max_queued,
                     " waiting, --max_queued_requests); retry later"));
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void RequestExecutor::Drain() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
  mu_.Await(absl::Condition(
      +[](RequestExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
        return e->queue_.empty() && e->running_ == 0;
      },
      this));
}

int RequestExecutor::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size()) + running_;
}

void RequestExecutor::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RequestExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    task = nullptr;  // what it holds goes before Drain can count it done
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace convserve
