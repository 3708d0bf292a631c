// A Backend for tests that wraps a real one and holds its Compile or Run
// calls at gates until the test opens them: requests that are accepted and
// provably still running (drain and shutdown tests), or builds that provably
// have concurrent lookups waiting on them (plan cache tests).
#ifndef CONVSERVE_TESTS_TEST_UTIL_GATED_BACKEND_H_
#define CONVSERVE_TESTS_TEST_UTIL_GATED_BACKEND_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/backend.h"

namespace convserve {

// Where calls wait. Shared by the test, the backend and its executables
// (which may outlive the backend's caller). Thread-safe.
class BackendGate {
 public:
  // Blocks until Open(); the caller counts as held meanwhile.
  void Pass();
  // Lets every held and later call through. Idempotent.
  void Open();
  // Waits up to `timeout` until at least `calls` calls are held; false on
  // timeout.
  bool AwaitHeld(int calls, absl::Duration timeout) const;
  // Calls waiting now, and calls that went through.
  int held() const;
  int passed() const;

 private:
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int passed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct GatedBackendOptions {
  // Every Compile waits here first; null: never held.
  std::shared_ptr<BackendGate> compile;
  // Every Run of every executable waits here first; null: never held.
  std::shared_ptr<BackendGate> run;
  // Holds only the Runs of the graph of this name (the others pass freely);
  // empty: every graph's.
  std::string run_only_graph;
};

class GatedBackend : public Backend {
 public:
  GatedBackend(std::unique_ptr<Backend> inner, GatedBackendOptions options);
  // Around the CPU backend with 2 threads (TestServer's default).
  static std::unique_ptr<GatedBackend> AroundCpu(GatedBackendOptions options);

  std::string name() const override { return inner_->name(); }
  std::string Describe() const override;
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::shared_ptr<const Graph> graph,
                                                      const Shape& input_shape) override;

 private:
  const std::unique_ptr<Backend> inner_;
  const GatedBackendOptions options_;
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_GATED_BACKEND_H_
