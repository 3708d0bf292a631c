// Runs requests on worker threads over any Backend (the CPU backend, or the
// single-stream cuDNN backend): compile, then run, per request or per batch
// (the batch's inputs joined into one host buffer, its output split back).
#ifndef CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_
#define CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
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

  // Counted, as the interface says: an identical graph loaded again (its
  // extra reference released at once) keeps the executables compiled for it.
  absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) override;
  void RemoveGraph(const std::string& graph_id) override;
  // Compiles the executable on the calling thread: the CPU keeps one per
  // (graph, shape) for all its workers.
  absl::Status Warm(const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
                    const CancelCheck& cancelled) override;
  void Submit(InferCall call) override;
  void SubmitBatch(InferBatch batch) override;
  int concurrency() const override { return executor_.threads(); }
  void Drain() override { executor_.Drain(); }
  std::string Describe() const override { return backend_->Describe(); }
  RunnerStats Stats() const override;

 private:
  // The executable of `graph` for `input_shape`, from the cache or built.
  absl::StatusOr<std::shared_ptr<Executable>> Compiled(const std::shared_ptr<const Graph>& graph,
                                                       const Shape& input_shape);
  absl::Status Execute(const InferCall& call, Shape* output_shape, InferTimings* timings);
  // Runs `call` alone, reports the execution (as part of a batch when
  // `batched`) and answers it; `timings` has queue and batch delay set.
  void RunAlone(InferCall& call, bool batched, InferTimings timings);
  // Runs the batch's calls joined; each call is answered.
  void RunBatch(InferBatch& batch, double queue_seconds);

  const std::unique_ptr<Backend> backend_;
  absl::Mutex graphs_mu_;
  absl::flat_hash_map<std::string, int> graph_refs_ ABSL_GUARDED_BY(graphs_mu_);
  // Compiled (graph, shape) executables, so repeated shapes skip Compile.
  PlanCache<Executable> executables_;
  // Declared last: destroyed first, so workers stop before the backend goes.
  RequestExecutor executor_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_BACKEND_RUNNER_H_
