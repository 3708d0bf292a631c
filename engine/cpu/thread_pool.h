// A fixed pool of threads that splits loops: ParallelFor(n, fn) runs fn(i)
// for i in [0, n) on the pool and the calling thread, and returns when all
// are done. Thread-safe; several callers may share the pool.
#ifndef CONVSERVE_ENGINE_CPU_THREAD_POOL_H_
#define CONVSERVE_ENGINE_CPU_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace convserve {

class ThreadPool {
 public:
  // Starts `threads` - 1 workers; the caller of ParallelFor is the last one.
  explicit ThreadPool(int threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CPU_THREAD_POOL_H_
