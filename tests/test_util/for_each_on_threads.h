// Runs independent pieces of test work (float64 references, client calls)
// on a pool of threads.
#ifndef CONVSERVE_TESTS_TEST_UTIL_FOR_EACH_ON_THREADS_H_
#define CONVSERVE_TESTS_TEST_UTIL_FOR_EACH_ON_THREADS_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace convserve {

// Runs `work(i)` for i in [0, count) on `threads` threads (0: one a hardware
// thread), each taking the next index when it is done with one, so slow
// items do not hold up a statically assigned share.
template <typename Work>
void ForEachOnThreads(size_t count, int threads, const Work& work) {
  if (threads == 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  const int used = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  if (used == 1) {
    for (size_t i = 0; i < count; ++i) work(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < used; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) work(i);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_FOR_EACH_ON_THREADS_H_
