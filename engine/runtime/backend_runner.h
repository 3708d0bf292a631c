// Runs requests on worker threads over any Backend (the CPU backend, or the
// single-stream cuDNN backend): compile, then run, per request.
#ifndef CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_
#define CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/runtime/plan_cache.h"
#include "engine/runtime/request_executor.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

class BackendRunner : public RequestRunner {
 public:
  BackendRunner(std::unique_ptr<Backend> backend, const RequestExecutorOptions& options,
                const PlanCacheOptions& cache_options = {})
      : backend_(std::move(backend)), executables_(cache_options), executor_(options) {}

  absl::Status AddGraph(const std::shared_ptr<const Graph>&) override {
    return absl::OkStatus();
  }
  void RemoveGraph(const std::string& graph_id) override;
  void Submit(InferCall call) override;
  void Drain() override { executor_.Drain(); }
  std::string Describe() const override { return backend_->Describe(); }
  RunnerStats Stats() const override;

 private:
  absl::Status Execute(const InferCall& call, Shape* output_shape, InferTimings* timings);

  const std::unique_ptr<Backend> backend_;
  // Compiled (graph, shape) executables, so repeated shapes skip Compile.
  PlanCache<Executable> executables_;
  // Declared last: destroyed first, so workers stop before the backend goes.
  RequestExecutor executor_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_
