// The GPU runtime: W worker threads per GPU, each owning a cuDNN handle, a
// non-blocking stream, a workspace and activation buffers that grow on
// demand, pinned staging buffers and CUDA events; a scheduler that sends
// each request to the GPU with the least outstanding work; and caches of
// engine choices, plans and per-GPU weights.
//
// Plans are per worker: cuDNN execution plans have known thread-safety
// limits when shared across threads (PyTorch keeps them thread-local for the
// same reason). The expensive part, choosing the engine (autotune), is done
// once per (layer, shape, policy, GPU model) and shared; each further worker
// only finalizes the chosen engine. docs/runtime.md has the measurements.
//
// Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_
#define CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/runtime/plan_cache.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

struct DevicePoolOptions {
  // CUDA device ordinals to use; empty means every visible GPU.
  std::vector<int> devices;
  // Worker threads per GPU.
  int workers_per_device = 2;
  // Requests waiting per GPU before new ones get RESOURCE_EXHAUSTED.
  int max_queued_per_device = 256;
  // Engine search and filters.
  EngineSelection selection;
  // Bounds of the plan cache (per-worker plans).
  PlanCacheOptions plan_cache;
};

// What an engine search decided for one layer and shape on one GPU model.
struct EngineChoice {
  LayerPath path = LayerPath::kFused;
  int64_t engine_index = -1;
};

class DevicePool : public RequestRunner {
 public:
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(const DevicePoolOptions& options);
  ~DevicePool() override;

  absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) override;
  void RemoveGraph(const std::string& graph_id) override;
  void Submit(InferCall call) override;
  void Drain() override;
  std::string Describe() const override;
  RunnerStats Stats() const override;

  PlanCacheStats plan_stats() const { return plans_.stats(); }
  PlanCacheStats choice_stats() const { return choices_.stats(); }

 private:
  struct Device;
  struct Worker;
  struct GraphResources;
  struct Task;

  explicit DevicePool(const DevicePoolOptions& options);

  void WorkerLoop(Device* device, Worker* worker);
  absl::Status Execute(Device& device, Worker& worker, Task& task, Shape* output_shape,
                       InferTimings* timings);
  absl::StatusOr<std::shared_ptr<ConvLayerPlan>> LayerPlan(Device& device, Worker& worker,
                                                           const Graph& graph, size_t layer,
                                                           const ConvLayerProblem& problem,
                                                           const ConvLayerBuffers& buffers);

  const DevicePoolOptions options_;
  std::map<std::string, std::string> versions_;
  std::string policy_;  // engine selection, part of every key
  std::vector<std::unique_ptr<Device>> devices_;
  PlanCache<EngineChoice> choices_;
  PlanCache<ConvLayerPlan> plans_;

  mutable absl::Mutex graphs_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<GraphResources>> graphs_
      ABSL_GUARDED_BY(graphs_mu_);
  absl::flat_hash_map<std::string, int> graph_refs_ ABSL_GUARDED_BY(graphs_mu_);

  std::atomic<bool> accepting_{true};
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_
