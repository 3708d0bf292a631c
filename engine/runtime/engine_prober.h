// Runs engine searches in a separate process (convserve-prober), one per
// GPU, so that a candidate that faults kills the prober and its CUDA context,
// never the server's. The prober announces each candidate before it touches
// the GPU; when the prober dies, hangs past a timeout or reports a lost
// context, the candidate in flight is quarantined in the plan store (so no
// process sharing that store runs it again, across restarts too), a new
// prober is started and the search resumes. The prober exits after a while
// without searches, giving back its GPU memory. Thread-safe; searches run one
// at a time per prober, which also keeps their timings apart.
#ifndef CONVSERVE_ENGINE_RUNTIME_ENGINE_PROBER_H_
#define CONVSERVE_ENGINE_RUNTIME_ENGINE_PROBER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/conv_layer_problem.h"
#include "engine/runtime/engine_search_report.h"
#include "engine/runtime/plan_store.h"

namespace convserve {

struct EngineProberOptions {
  // The prober executable.
  std::string binary;
  // Its arguments (ProberArguments()).
  std::vector<std::string> arguments;
  // How long one candidate may take (build, run, timing) before the prober
  // is killed and the candidate quarantined as hanging.
  absl::Duration candidate_timeout = absl::Seconds(120);
  // How long a new prober may take to report READY (CUDA and cuDNN start).
  absl::Duration start_timeout = absl::Seconds(60);
  // Candidates one search may quarantine before it gives up.
  int max_faults_per_search = 8;
  // A prober with no search for this long exits; the next search starts one.
  absl::Duration idle_timeout = absl::Seconds(60);
  // For log lines: "GPU 0".
  std::string label = "GPU";
};

struct EngineProberStats {
  // Searches answered (OK or not).
  int64_t searches = 0;
  // Prober processes started.
  int64_t starts = 0;
  // Candidates quarantined because the prober faulted, died or hung on them.
  int64_t quarantined = 0;
  // Candidates not run because an earlier verdict had quarantined them.
  int64_t vetoed = 0;
};

class EngineProber {
 public:
  // `store` (which outlives the prober) receives quarantine verdicts; the
  // prober process reads the same directory. Starts no process yet.
  static absl::StatusOr<std::unique_ptr<EngineProber>> Create(const EngineProberOptions& options,
                                                              PlanStore* store);
  // Stops the prober process (closing its input, then killing it if needed).
  ~EngineProber();

  EngineProber(const EngineProber&) = delete;
  EngineProber& operator=(const EngineProber&) = delete;

  // The search for `problem`, run in the prober. UNAVAILABLE when the prober
  // cannot be started; INTERNAL after max_faults_per_search quarantines; the
  // search's own error (e.g. UNIMPLEMENTED: no engine passes) otherwise.
  absl::StatusOr<SearchReport> Search(const ConvLayerProblem& problem);

  EngineProberStats stats() const;
  // Whether a prober process is up (waits for a search in progress).
  bool running() const;
  // Shutdown: the search in progress stops (UNAVAILABLE, no verdict) and
  // later ones are refused. Does not wait; thread-safe.
  void Cancel();

 private:
  struct Process;
  // How a stopped prober ended.
  struct Ending {
    std::string how;  // "exited with status 3", "was killed by signal 11 (...)"
    bool killed_by_us = false;
    bool killed_by_someone_else = false;  // SIGKILL we did not send
  };

  EngineProber(const EngineProberOptions& options, PlanStore* store);

  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops (closing its input, or killing it when `kill_now` or when it does
  // not exit in 5 s) and reaps the process.
  Ending StopLocked(bool kill_now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::string> ReadLineLocked(absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IdleLoop();

  const EngineProberOptions options_;
  PlanStore* const store_;  // owned by the runtime, which outlives the prober

  // Held for a whole search (one at a time) and by the idle thread.
  mutable absl::Mutex mu_;
  std::unique_ptr<Process> process_ ABSL_GUARDED_BY(mu_);
  // The target key the running prober reported (CudnnTarget::Key()).
  std::string target_key_ ABSL_GUARDED_BY(mu_);
  absl::Time last_used_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Read by metrics while a search runs, hence atomics, not mu_.
  std::atomic<int64_t> searches_{0}, starts_{0}, quarantined_{0}, vetoed_{0};
  std::atomic<bool> cancelled_{false};
  std::thread idle_thread_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_ENGINE_PROBER_H_
