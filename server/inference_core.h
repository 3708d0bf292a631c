// What both wire protocols share: the loaded graphs, the backend and the
// request workers. It speaks engine types only; server/proto_convert.cc
// translates the wire messages. Thread-safe.
#ifndef CONVSERVE_SERVER_INFERENCE_CORE_H_
#define CONVSERVE_SERVER_INFERENCE_CORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/runtime/dynamic_batcher.h"
#include "engine/runtime/infer_call.h"
#include "engine/runtime/request_executor.h"
#include "engine/runtime/request_runner.h"
#include "engine/runtime/warmup_shapes.h"
#include "server/graph_registry.h"
#include "server/graph_warmups.h"

namespace convserve {

struct InferenceCoreOptions {
  // Limits every graph and tensor must respect.
  GraphLimits graph_limits;
  // How many graphs and parameter bytes may be loaded.
  GraphRegistryOptions registry;
  // Request workers and their queue, when the core wraps a Backend.
  RequestExecutorOptions executor;
  // Dynamic batching of a graph whose LoadGraph does not say (the server's
  // flags); max_batch_size 0 is off.
  DynamicBatchingOptions default_batching;
  // Floating-point operations one request may cost (engine/compute_cost.h);
  // a costlier one is INVALID_ARGUMENT before it queues. 0: no limit.
  double max_request_flops = 0;
  // Warm-up of a graph whose LoadGraph names no shapes (--warmup_shapes);
  // each graph takes the sizes of its spatial rank. Empty: none.
  std::vector<WarmupSize> default_warmup;
};

// What a LoadGraph asks of the warm-up (convserve.v1.Warmup).
struct WarmupRequest {
  // Input shapes (logical N, C, spatial); empty: the server's default sizes.
  std::vector<Shape> shapes;
  // No warm-up at all; `shapes` must be empty.
  bool disabled = false;
  // LoadGraph returns once the warm-up ended; false returns at once.
  bool wait = true;
};

class InferenceCore {
 public:
  static absl::StatusOr<std::unique_ptr<InferenceCore>> Create(
      const InferenceCoreOptions& options, std::unique_ptr<RequestRunner> runner);
  // Runs `backend` on `options.executor` worker threads.
  static absl::StatusOr<std::unique_ptr<InferenceCore>> Create(
      const InferenceCoreOptions& options, std::unique_ptr<Backend> backend);

  // Validates and registers a graph; `batching` (nullopt: the default)
  // with max_batch_size > 0 puts a dynamic batcher in front of the runner
  // for it. An identical graph already loaded with other batching settings
  // is FAILED_PRECONDITION.
  //
  // Then warms the graph up (`warmup`; the default: the server's sizes,
  // waiting): plans for each input shape, and for the batches formed from
  // it, are built on every device. Shapes that do not fit the graph are
  // INVALID_ARGUMENT before anything loads; a failed warm-up leaves the
  // graph loaded and FAILED (WarmupOf says why). A graph already loaded warms
  // up the shapes it had not. ABORTED when the graph is unloaded during the
  // warm-up this call waits for.
  absl::StatusOr<GraphRegistry::AddResult> LoadGraph(
      GraphSpec spec, std::optional<DynamicBatchingOptions> batching = std::nullopt,
      const WarmupRequest& warmup = {});
  // The warm-up state of a loaded graph (READY with no shapes when it had
  // nothing to warm up).
  WarmupStatus WarmupOf(const std::string& graph_id) const { return warmups_.Get(graph_id); }
  // Graphs warming up now.
  int warming_graphs() const { return warmups_.warming(); }
  // Calls `done` once the graph's warm-up has ended (at once when none is
  // running): see GraphWarmups::WhenEnded. ABORTED when the graph was
  // unloaded meanwhile, also if that was before this call.
  void WhenWarmedUp(const std::shared_ptr<const Graph>& graph, GraphWarmups::EndCallback done);
  absl::Status UnloadGraph(const std::string& name_or_id);
  absl::StatusOr<std::shared_ptr<const Graph>> FindGraph(const std::string& name_or_id) const;
  std::vector<std::shared_ptr<const Graph>> ListGraphs() const;
  // The batching settings of a loaded graph; nullopt when it does not batch.
  std::optional<DynamicBatchingOptions> Batching(const std::string& graph_id) const;
  const DynamicBatchingOptions& default_batching() const { return options_.default_batching; }
  // Requests of the graph waiting in its dynamic batcher now (0 when it does
  // not batch).
  int WaitingToBatch(const std::string& graph_id) const;

  // Checks the request, queues it and returns; `call.done` reports the end.
  void Infer(InferCall call);

  // True until Drain starts, while the runner can serve (a GPU is healthy).
  bool ready() const { return ready_.load() && runner_->healthy(); }
  // Refuses new requests (UNAVAILABLE) and waits for accepted ones.
  void Drain();

  const RequestRunner& runner() const { return *runner_; }
  // For what maps memory for the runner (the shared-memory registry).
  RequestRunner* mutable_runner() { return runner_.get(); }
  // See RequestRunner::set_plan_build_observer; before traffic starts.
  void set_plan_build_observer(std::function<void(const PlanBuildEvent&)> observer) {
    runner_->set_plan_build_observer(std::move(observer));
  }
  // Hears of each warm-up run that ended; before any graph is loaded.
  void set_warmup_observer(std::function<void(const WarmupEvent&)> observer) {
    warmups_.set_observer(std::move(observer));
  }
  // See RequestRunner::set_execution_observer; before traffic starts.
  void set_execution_observer(std::function<void(const ExecutionEvent&)> observer) {
    runner_->set_execution_observer(std::move(observer));
  }
  // See RequestRunner::set_device_failure_observer; before traffic starts.
  void set_device_failure_observer(std::function<void(const DeviceFailure&)> observer) {
    runner_->set_device_failure_observer(std::move(observer));
  }

  // Requests handed to the runner, and those of them answered (OK or not).
  // After Drain the two are equal: no accepted request goes unanswered.
  int64_t accepted() const { return accepted_.load(); }
  int64_t answered() const { return answered_.load(); }

 private:
  InferenceCore(const InferenceCoreOptions& options, std::unique_ptr<RequestRunner> runner)
      : options_(options),
        runner_(std::move(runner)),
        registry_(options.registry),
        warmups_(runner_.get()) {}

  // The execution shapes of `graph`'s warm-up; INVALID_ARGUMENT names a
  // requested shape that no request of the graph could have.
  absl::StatusOr<std::vector<Shape>> WarmupShapes(const Graph& graph, const WarmupRequest& warmup,
                                                  const DynamicBatchingOptions& batching) const;

  const InferenceCoreOptions options_;
  const std::unique_ptr<RequestRunner> runner_;
  GraphRegistry registry_;
  // Declared after runner_: destroyed first, since its threads use it.
  GraphWarmups warmups_;
  // Infer checks readiness and hands the call to the runner under a reader
  // lock; Drain flips readiness under the writer lock. So every call that
  // saw the server ready reaches the runner before the runner drains, and is
  // run rather than refused.
  absl::Mutex drain_mu_;
  std::atomic<bool> ready_{true};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> answered_{0};
  // Declared after runner_: destroyed first, since batchers hand it work.
  mutable absl::Mutex batchers_mu_;
  // By graph id; only graphs that batch.
  absl::flat_hash_map<std::string, std::shared_ptr<DynamicBatcher>> batchers_
      ABSL_GUARDED_BY(batchers_mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_INFERENCE_CORE_H_
