// What runs accepted requests: the CPU runner (worker threads over a Backend)
// or the GPU device pool. InferenceCore talks only to this interface.
// Implementations are thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_
#define CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/runtime/cuda_graph_cache.h"
#include "engine/runtime/host_buffer_pool.h"
#include "engine/runtime/infer_call.h"
#include "engine/runtime/plan_cache.h"

namespace convserve {

// One device's state for metrics; the CPU runner reports one "cpu" device.
struct DeviceStats {
  // "0", "1", ... for GPUs, "cpu" for the CPU runner.
  std::string device;
  // GPU UUID ("GPU-...") and model name, empty for the CPU.
  std::string uuid;
  std::string name;
  int64_t queued = 0;
  int64_t running = 0;
  // Requests answered OK, and with an error after they were queued.
  int64_t completed = 0;
  int64_t failed = 0;
  // GPU memory; 0 for the CPU.
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
  // False once a CUDA context of the process was lost (a sticky error ends
  // all CUDA work of the process): no more requests until it restarts.
  bool healthy = true;
  // Sticky CUDA errors that happened on this device (0 or 1).
  int64_t faults = 0;
  // Requests launched on a worker's stream before the worker had seen its
  // previous request finish (DevicePoolOptions::launch_ahead).
  int64_t launched_ahead = 0;
};

// Engine searches and their containment (GPU runners).
struct EngineSearchStats {
  // Searches run (in prober processes or in-process).
  int64_t searches = 0;
  // Prober processes started.
  int64_t prober_starts = 0;
  // Candidates quarantined: they faulted, crashed or hung the prober.
  int64_t quarantined = 0;
  // Candidates not run because an earlier verdict quarantined them.
  int64_t vetoed = 0;
  // Layer problems whose engine choice came from the plan store, not a search.
  int64_t stored_choices = 0;
  // Pointwise pairs (two 1x1 layers) raced against their two plans, and
  // those the fused kernel won (DevicePoolOptions::fuse_pointwise_pairs).
  int64_t pair_races = 0;
  int64_t pairs_fused = 0;
};

struct RunnerStats {
  std::vector<DeviceStats> devices;
  // Compiled plans (per worker on GPUs; executables on the CPU).
  PlanCacheStats plans;
  // Library versions for the build-info metric, e.g. {"cudnn_runtime", "9.14.0"}.
  std::map<std::string, std::string> versions;
  EngineSearchStats engine_search;
  // CUDA graph captures and replays (GPU runners; zero on the CPU).
  CudaGraphStats cuda_graphs;
};

// A device lost its CUDA context while serving (and with it, the process
// every GPU).
struct DeviceFailure {
  // "0", "1", ...
  std::string device;
  // The CUDA error and what was running.
  std::string error;
  // Devices still serving after this one failed.
  int healthy_devices = 0;
};

// A plan finished building (or failed to).
struct PlanBuildEvent {
  std::string device;
  // "fused", "unfused", or "cpu".
  std::string path;
  bool ok = true;
  double seconds = 0;
};

class RequestRunner {
 public:
  virtual ~RequestRunner() = default;

  // A graph was loaded: prepare what runs it (e.g. upload weights to every
  // GPU). Counted: each AddGraph is matched by one RemoveGraph.
  virtual absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) = 0;
  // The matching release. Requests already accepted keep the graph's
  // resources until they finish; then they are freed.
  virtual void RemoveGraph(const std::string& graph_id) = 0;

  // Queues the call; `call.done` reports its end. The call's shape and
  // bytes were checked by the caller.
  virtual void Submit(InferCall call) = 0;
  // Queues the calls as one execution (see InferBatch); every call's `done`
  // reports its own end. One call's failure (cancelled, its own copy
  // failing) does not fail the others; a failure of the joined execution
  // itself runs each call again alone. The calls' shapes and bytes were
  // checked by the caller, and they share graph, C and spatial dims.
  virtual void SubmitBatch(InferBatch batch) = 0;

  // Warm-up at load: builds the plans an execution of `graph` with input
  // `input_shape` needs on every device and worker that may run one (each
  // GPU worker builds its own, docs/runtime.md), so the first request of
  // that shape builds none. Blocks until they are built; the first failure
  // is returned, naming the device. `cancelled` is checked between builds
  // (CANCELLED when it turns true). The graph was added (AddGraph) and its
  // shape checked by the caller. Call it from a thread that may wait.
  virtual absl::Status Warm(const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
                            const CancelCheck& cancelled) = 0;

  // Executions that can run at once (worker threads over healthy devices):
  // how many batches a dynamic batcher keeps in flight.
  virtual int concurrency() const = 0;

  // Refuses new calls (UNAVAILABLE) and returns when accepted ones are done.
  virtual void Drain() = 0;

  // For the start-up log.
  virtual std::string Describe() const = 0;

  // False when no device can serve any more (every GPU failed).
  virtual bool healthy() const { return true; }

  // A host buffer for a request's or response's bytes, from a pool: page-
  // locked on GPU runners (copies to and from the GPU read and write it
  // directly), plain memory on the CPU.
  absl::StatusOr<TensorMemory> AllocateHostBuffer(size_t bytes) {
    return host_buffers_->Get(bytes);
  }

  // Shared-memory support. Page-locks host memory for the runner's devices
  // (a system region), so copies read and write it directly; the returned
  // token undoes it when released (null: nothing to do, e.g. on the CPU).
  virtual absl::StatusOr<std::shared_ptr<const void>> PinHostMemory(void* data, size_t bytes) {
    return std::shared_ptr<const void>();
  }
  // Whether OpenCudaIpc works here (CUDA shared memory is served).
  virtual bool serves_device_memory() const { return false; }
  // Maps a CUDA IPC memory handle (cudaIpcMemHandle_t bytes) of GPU `device`
  // into this process: the device pointer, valid while the token lives.
  struct DeviceMapping {
    uint8_t* data = nullptr;
    std::shared_ptr<const void> token;
  };
  virtual absl::StatusOr<DeviceMapping> OpenCudaIpc(const std::string& handle, int device,
                                                   size_t bytes) {
    return absl::FailedPreconditionError(
        "CUDA shared memory needs the GPU backend; this server runs on CPU");
  }

  // A snapshot for metrics; called from the metrics thread.
  virtual RunnerStats Stats() const = 0;

  // Called after every plan build, from the building thread; set once before
  // traffic starts.
  void set_plan_build_observer(std::function<void(const PlanBuildEvent&)> observer) {
    plan_build_observer_ = std::move(observer);
  }
  // Called after every execution, from the worker, before the requests that
  // ran in it are answered; set once before traffic starts.
  void set_execution_observer(std::function<void(const ExecutionEvent&)> observer) {
    execution_observer_ = std::move(observer);
  }
  // Called from the worker that saw a device fail; set once before traffic
  // starts.
  void set_device_failure_observer(std::function<void(const DeviceFailure&)> observer) {
    device_failure_observer_ = std::move(observer);
  }

 protected:
  // Set once, at creation (GPU runners: page-locked buffers).
  void set_host_buffer_pool(std::shared_ptr<HostBufferPool> pool) {
    host_buffers_ = std::move(pool);
  }
  void ReportPlanBuild(const PlanBuildEvent& event) const {
    if (plan_build_observer_) plan_build_observer_(event);
  }
  void ReportDeviceFailure(const DeviceFailure& failure) const {
    if (device_failure_observer_) device_failure_observer_(failure);
  }
  void ReportExecution(const ExecutionEvent& event) const {
    if (execution_observer_) execution_observer_(event);
  }

 private:
  std::shared_ptr<HostBufferPool> host_buffers_ = HostBufferPool::CreateUnpinned();
  std::function<void(const PlanBuildEvent&)> plan_build_observer_;
  std::function<void(const DeviceFailure&)> device_failure_observer_;
  std::function<void(const ExecutionEvent&)> execution_observer_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_REQUEST_RUNNER_H_
