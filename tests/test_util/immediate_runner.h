// A RequestRunner for tests that check what happens before and after the
// work (request checking, response building) at the rate of a fuzzer: it
// computes nothing and answers every call OK on the caller's thread, its
// output zero-filled. It reads every input byte first, so a span that points
// past what the request holds is a sanitizer report, not a silent pass.
// Thread-safe.
#ifndef CONVSERVE_TESTS_TEST_UTIL_IMMEDIATE_RUNNER_H_
#define CONVSERVE_TESTS_TEST_UTIL_IMMEDIATE_RUNNER_H_

#include <atomic>
#include <memory>
#include <string>

#include "engine/runtime/request_runner.h"

namespace convserve {

class ImmediateRunner : public RequestRunner {
 public:
  absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) override {
    return absl::OkStatus();
  }
  void RemoveGraph(const std::string& graph_id) override {}
  void Submit(InferCall call) override;
  void SubmitBatch(InferBatch batch) override;
  // Nothing to build: a warm-up is done at once (CANCELLED when asked to
  // stop first).
  absl::Status Warm(const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
                    const CancelCheck& cancelled) override {
    if (cancelled && cancelled()) return absl::CancelledError("warm-up cancelled");
    return absl::OkStatus();
  }
  int concurrency() const override { return 1; }
  void Drain() override {}
  std::string Describe() const override { return "immediate (no compute)"; }
  RunnerStats Stats() const override { return {}; }

  // Calls answered so far.
  int64_t answered() const { return answered_.load(); }

 private:
  std::atomic<int64_t> answered_{0};
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_IMMEDIATE_RUNNER_H_
