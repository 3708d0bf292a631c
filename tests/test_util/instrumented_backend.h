// A Backend for tests that wraps a real one and counts, logs, stalls or
// perturbs its runs: the server's request count (which it does not export),
// when each run started and ended and how, a server that stops answering for
// a known time, a server that returns wrong numbers or fails some requests.
#ifndef CONVSERVE_TESTS_TEST_UTIL_INSTRUMENTED_BACKEND_H_
#define CONVSERVE_TESTS_TEST_UTIL_INSTRUMENTED_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/backend.h"

namespace convserve {

// Every Run of an InstrumentedBackend's executables, as the server's worker
// saw it: when it started, when it returned and with what status. Shared by
// the test and the executables (which may outlive the backend's caller).
// Thread-safe.
class RunLog {
 public:
  struct Run {
    absl::Time start;
    absl::Time end;
    absl::Status status;
  };

  void Started();
  void Ended(Run run);
  // Wait up to `timeout` until at least `runs` runs have started (ended);
  // false on timeout.
  bool AwaitStarted(int runs, absl::Duration timeout) const;
  bool AwaitEnded(int runs, absl::Duration timeout) const;
  int started() const;
  // The runs that have returned, in the order they returned.
  std::vector<Run> ended() const;

 private:
  mutable absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Run> ended_ ABSL_GUARDED_BY(mu_);
};

struct InstrumentedBackendOptions {
  // Records every Run; the test keeps a copy of the pointer.
  std::shared_ptr<RunLog> log = std::make_shared<RunLog>();
  // Incremented after every successful Run of any executable; the test keeps
  // a copy of the pointer to read the count while the server owns the backend.
  std::shared_ptr<std::atomic<int64_t>> runs = std::make_shared<std::atomic<int64_t>>(0);
  // The Run call (0-based, over all executables) that starts a stall; -1: none.
  int64_t stall_at_run = -1;
  // How long the stall lasts. Every Run that starts during it waits for its
  // end, as when a whole server pauses (a GC, swapping, a hung device).
  absl::Duration stall = absl::Milliseconds(200);
  // Every output element is multiplied by this after a correct run; 1.01
  // makes a 1% relative error.
  float output_scale = 1.0f;
  // When > 0, every n-th Run call (the n-th, 2n-th, ...) fails with
  // INTERNAL instead of running.
  int64_t fail_every = 0;
};

class InstrumentedBackend : public Backend {
 public:
  InstrumentedBackend(std::unique_ptr<Backend> inner, InstrumentedBackendOptions options);
  // Around the CPU backend with 2 threads (TestServer's default).
  static std::unique_ptr<InstrumentedBackend> AroundCpu(InstrumentedBackendOptions options);
  ~InstrumentedBackend() override;

  std::string name() const override;
  std::string Describe() const override;
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::shared_ptr<const Graph> graph,
                                                      const Shape& input_shape) override;

  // Shared with the executables, which may outlive the backend's caller.
  struct State;

 private:
  const std::unique_ptr<Backend> inner_;
  const std::shared_ptr<State> state_;
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_INSTRUMENTED_BACKEND_H_
