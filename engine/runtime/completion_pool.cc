#include "engine/runtime/completion_pool.h"

#include <utility>

namespace convserve {

CompletionPool::CompletionPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back(&CompletionPool::Loop, this);
}

CompletionPool::~CompletionPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void CompletionPool::Post(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
}

void CompletionPool::AwaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CompletionPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
        return pool->queue_.empty() && pool->running_ == 0;
      },
      this));
}

void CompletionPool::Loop() {
  while (true) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CompletionPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and everything posted ran
      work = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    work();
    work = nullptr;  // what it holds goes before the pool counts it done
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace convserve
