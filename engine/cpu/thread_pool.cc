#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/thread_name.h"

namespace convserve {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) {
    workers_.emplace_back([this, i] {
      NameThisThread(absl::StrCat("cs-cpu", i));
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Items are claimed from a shared counter, so an idle helper that starts
  // late finds nothing left and returns at once.
  struct Shared {
    std::atomic<int64_t> next{0};
    absl::Mutex mu;
    absl::CondVar all_done;
    int64_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  const auto drain = [shared, n, &fn] {
    int64_t finished = 0;
    for (int64_t i; (i = shared->next.fetch_add(1)) < n; ++finished) fn(i);
    absl::MutexLock lock(&shared->mu);
    shared->done += finished;
    if (shared->done == n) shared->all_done.SignalAll();
  };
  const int helpers = static_cast<int>(std::min<int64_t>(workers_.size(), n - 1));
  {
    absl::MutexLock lock(&mu_);
    for (int h = 0; h < helpers; ++h) tasks_.push_back(drain);
  }
  drain();
  absl::MutexLock lock(&shared->mu);
  while (shared->done != n) shared->all_done.Wait(&shared->mu);
}

}  // namespace convserve
