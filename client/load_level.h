// One level of a load run (one concurrency or one request rate): keeps the
// requests going, assigns each to the warm-up or a measurement window by its
// scheduled send time, and closes windows until the level is stable. Used by
// RunLoad (load_generator.h); an object runs once.
#ifndef CONVSERVE_CLIENT_LOAD_LEVEL_H_
#define CONVSERVE_CLIENT_LOAD_LEVEL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/load_options.h"
#include "client/load_result.h"
#include "client/load_session.h"

namespace convserve {

class LoadLevel {
 public:
  // Exactly one of `concurrency` (closed loop) and `request_rate` (open
  // loop) is > 0. `session` and `options` must outlive the object.
  LoadLevel(LoadSession* session, const LoadOptions* options, int concurrency, double request_rate,
            uint64_t arrival_seed);
  ~LoadLevel();

  LoadLevel(const LoadLevel&) = delete;
  LoadLevel& operator=(const LoadLevel&) = delete;

  // Runs the level; returns once every request it sent has ended.
  LevelResult Run();
  // Requests this level sent during its warm-up (valid after Run).
  int64_t warmup_requests() const;

 private:
  struct Record {
    // -1: warm-up; otherwise the measurement window, from 0.
    int64_t window;
    // Since start_: the intended send time, and the end of the call.
    int64_t scheduled_ns;
    int64_t end_ns;
    absl::StatusCode code;
  };

  int64_t NowNs() const;
  bool CountWindows() const { return options_.measurement.window_requests > 0; }

  // Assigns a request scheduled at `scheduled_ns` to its window and counts
  // it in flight; false once the level is stopping.
  bool BeginRequestLocked(int64_t scheduled_ns, int64_t* window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(int64_t window, int64_t scheduled_ns);
  void Completed(int64_t window, int64_t scheduled_ns, const absl::Status& status,
                 InferOutput* output);
  // The open-loop arrival schedule; on its own thread.
  void ScheduleArrivals();
  // A closed loop's caller thread with blocking calls: one request after
  // another until the level stops.
  void CallInTurn();
  bool Blocking() const { return concurrency_ > 0 && options_.blocking_calls; }

  int64_t WindowStartNsLocked(int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t WindowEndNsLocked(int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Window `awaited_window_` has ended and everything sent up to it is done.
  bool AwaitedWindowDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NothingInFlightLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; }
  void WaitForWindow(int64_t k);
  WindowResult SummarizeWindowLocked(int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LevelResult MergeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LevelName() const;

  // Both outlive the level (constructor contract).
  LoadSession* const session_;
  const LoadOptions& options_;
  const int concurrency_;
  const double request_rate_;
  const uint64_t arrival_seed_;
  const int64_t warmup_ns_;
  const int64_t window_ns_;
  std::chrono::steady_clock::time_point start_;
  std::thread scheduler_;
  // Closed loop with blocking calls: one thread per request in flight.
  std::vector<std::thread> callers_;
  // Completions so far, for sampling outputs to verify.
  std::atomic<int64_t> completions_{0};

  mutable absl::Mutex mu_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
  // Requests in flight per window, at index window + 1 (0 is warm-up).
  std::vector<int64_t> outstanding_ ABSL_GUARDED_BY(mu_);
  // Windows of a request count: the scheduled time of each one's first request.
  std::vector<int64_t> window_start_ns_ ABSL_GUARDED_BY(mu_);
  int64_t measured_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_scheduled_ns_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t awaited_window_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<WindowResult> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_LEVEL_H_
