// The GPU runtime: W worker threads per GPU, each owning a cuDNN handle, a
// non-blocking stream, a workspace and activation buffers that grow on
// demand, pinned staging buffers and CUDA events; a scheduler that sends
// each request to the GPU with the least outstanding work; and
// caches of engine choices, plans and per-GPU weights.
//
// Plans are per worker: cuDNN execution plans have known thread-safety
// limits when shared across threads (PyTorch keeps them thread-local for the
// same reason). The expensive part, choosing the engine, is done once per
// (layer problem, policy, GPU model) and shared; each further worker only
// finalizes the chosen engine configuration. docs/runtime.md has the
// measurements.
//
// Engine searches run in a prober process per GPU (EngineProber), so a
// candidate that faults cannot take the server down; it is quarantined in
// the plan store instead. If a context is lost anyway (a sticky CUDA error
// while serving), CUDA fails all further work of the process, on every GPU:
// every GPU is marked lost, waiting requests are answered UNAVAILABLE and the
// failure observer hears of it (the server turns health NOT_SERVING and
// exits 3 to be restarted).
//
// Requests a dynamic batcher joined (SubmitBatch) run as one execution: each
// call's input is copied into its slice of the worker's input buffer, the
// layers run once with N the sum of theirs, and each call's slice of the
// output is copied back to it.
//
// A worker captures a request's layer launches into CUDA graphs the second
// time it runs the same graph, input shape and pointers, and replays them
// after (docs/runtime.md, "CUDA graphs"). It launches the next waiting
// request of the same graph and shape whose tensors need no staging before
// it waits for the last one (docs/runtime.md, "Launching ahead").
//
// Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_
#define CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/cudnn/pointwise_pair_kernel.h"
#include "engine/runtime/cuda_graph_cache.h"
#include "engine/runtime/engine_choice_store.h"
#include "engine/runtime/engine_prober.h"
#include "engine/runtime/plan_cache.h"
#include "engine/runtime/plan_store.h"
#include "engine/runtime/request_executor.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

struct DevicePoolOptions {
  // CUDA device ordinals to use; empty means every visible GPU.
  std::vector<int> devices;
  // Worker threads per GPU.
  int workers_per_device = 2;
  // How long one worker per GPU keeps polling its queue after its last
  // request before it sleeps: a request arriving meanwhile starts without a
  // thread wake-up (tens of microseconds on some hosts) at the cost of one
  // busy core per GPU while requests keep coming. Zero: workers sleep at once.
  absl::Duration worker_spin = absl::Microseconds(500);
  // A worker launches the next waiting request of the same graph and input
  // shape, of one segment of layers, read and written in place (device
  // memory or page-locked host memory: no staging), before it waits for the
  // request on its stream to finish: the GPU starts the next one without
  // waiting for the worker.
  bool launch_ahead = true;
  // Threads that answer a worker's requests while more wait for its GPU
  // (RunTask); 0: one per worker.
  int completion_threads = 0;
  // Requests waiting per GPU before new ones get RESOURCE_EXHAUSTED.
  int max_queued_per_device = 256;
  // Engine search and filters; a null errata means the shipped list.
  EngineSelection selection;
  // Operator errata file `selection.errata` was loaded from (the prober
  // loads it too); empty for the shipped list only.
  std::string errata_file;
  // Bounds of the plan cache (per-worker plans).
  PlanCacheOptions plan_cache;
  // Capture each request's layer launches into CUDA graphs and replay them
  // (docs/runtime.md, "CUDA graphs"); false: plain launches only.
  bool cuda_graphs = true;
  // Bounds of each worker's captured graphs.
  CudaGraphCacheOptions cuda_graph_cache;
  // Race each pair of consecutive layers the pointwise pair kernel runs (two
  // 1x1 convs on 16-bit channels-last tensors: engine/cudnn/pointwise_pair.h)
  // against the two layers' plans, once per pair of layer problems and GPU
  // model, and run the faster (docs/cudnn.md, "Fused 1x1 pairs"). False:
  // every layer runs its own plan.
  bool fuse_pointwise_pairs = true;
  // The convserve-prober executable that runs engine searches, one process
  // per GPU. Empty runs them in this process: a candidate that faults then
  // loses the GPU (it is still quarantined, for the next start when the plan
  // store is on disk).
  std::string prober_binary;
  // The plan store directory (quarantine verdicts, kept across restarts);
  // empty keeps them in a private temporary directory for this process.
  std::string plan_cache_dir;
  // How long one candidate may run in the prober before it counts as hung.
  absl::Duration prober_candidate_timeout = absl::Seconds(120);
  // A prober idle this long exits (freeing its GPU memory).
  absl::Duration prober_idle_timeout = absl::Seconds(60);
  // Log level name for the probers.
  std::string prober_log_level = "info";
  // Test hooks. A request for the graph of this name makes a misaligned
  // write on its GPU (a sticky CUDA error); the prober candidate at this rank
  // faults the prober's context. Empty / -1: off.
  std::string testing_fault_graph;
  int testing_fault_candidate_rank = -1;
  // Test hook: a raced pointwise pair runs fused even where its two layers
  // were faster (so tests run the fused path on any shape).
  bool testing_always_fuse_pairs = false;
  // Test hook: a pointwise pair's race launches a misaligned write in place
  // of the kernel's first sample, losing the GPU as a faulting kernel would.
  bool testing_fault_in_pair_race = false;
};

// The outcome of a pointwise pair's race on one GPU model
// (DevicePoolOptions::fuse_pointwise_pairs).
struct PointwisePairChoice {
  // The kernel won: the pair runs as one launch on `grid` (the fastest of
  // PointwisePairGrids).
  bool fused = false;
  PointwisePairGrid grid;
  // Median time per run of the kernel on `grid` and of the two layers'
  // plans (0 when not raced: quarantined, or the race failed).
  float fused_ms = 0;
  float layers_ms = 0;
};
// Per layer of an execution: set at i when layers i and i + 1 run fused.
using FusedPairs = std::vector<std::shared_ptr<const PointwisePairChoice>>;

class DevicePool : public RequestRunner {
 public:
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(const DevicePoolOptions& options);
  ~DevicePool() override;

  absl::Status AddGraph(const std::shared_ptr<const Graph>& graph) override;
  void RemoveGraph(const std::string& graph_id) override;
  // Queues a warm-up job on every worker of every healthy GPU (each worker
  // builds plans with its own handle, on its own thread; it takes warm-up
  // jobs before waiting requests) and waits for all of them.
  absl::Status Warm(const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
                    const CancelCheck& cancelled) override;
  void Submit(InferCall call) override;
  void SubmitBatch(InferBatch batch) override;
  int concurrency() const override;
  void Drain() override;
  std::string Describe() const override;
  RunnerStats Stats() const override;
  bool healthy() const override;
  absl::StatusOr<std::shared_ptr<const void>> PinHostMemory(void* data, size_t bytes) override;
  bool serves_device_memory() const override { return true; }
  absl::StatusOr<DeviceMapping> OpenCudaIpc(const std::string& handle, int device,
                                           size_t bytes) override;

  PlanCacheStats plan_stats() const { return plans_.stats(); }
  PlanCacheStats choice_stats() const { return choices_.stats(); }
  // Captures, replays and fallbacks of every worker.
  CudaGraphStats cuda_graph_stats() const;

 private:
  struct Device;
  struct Worker;
  struct GraphResources;
  struct Task;
  struct WarmJob;
  struct Execution;

  explicit DevicePool(const DevicePoolOptions& options);

  void WorkerLoop(Device* device, Worker* worker);
  // Polls `device`'s queue for options_.worker_spin unless another worker
  // does or work is queued.
  void PollQueue(Device& device);
  // Builds the plans of `job` on `worker`, runs them once (RunLayersOnce) and
  // reports the result to the job.
  void RunWarmJob(Device& device, Worker& worker, WarmJob& job);
  // Runs the graph's layers once on zeros in the worker's own buffers (the
  // output is dropped): CUDA loads a kernel's module at its first launch,
  // which a warmed-up graph's first request must not pay.
  absl::Status RunLayersOnce(Device& device, Worker& worker, const Graph& graph,
                             const Shape& input_shape, const std::vector<Shape>& outputs,
                             const std::vector<ConvLayerProblem>& problems,
                             const std::vector<std::shared_ptr<ConvLayerPlan>>& plans);
  // The device weights of a loaded graph; null once it is unloaded.
  std::shared_ptr<GraphResources> Resources(const std::string& graph_id);
  // Makes the task of `calls` (one request, or a batch) and routes it.
  void Enqueue(std::vector<InferCall> calls, std::vector<double> delays, bool batched);
  // Executes `task` on `worker` and answers its calls, launching the
  // requests that follow it (TakeFollower, unless !take_followers) each
  // before the last is waited for.
  void RunTask(Device& device, Worker& worker, std::unique_ptr<Task> task,
               bool take_followers = true);
  // Answers the calls of `task` once its execution is over; a failed batch
  // runs each call again alone. Handles a lost GPU.
  void Answer(Device& device, Worker& worker, std::unique_ptr<Task> task, Execution& execution);
  // The next waiting request, taken from `device`'s queue, when it can run
  // on `worker`'s stream behind `leader` without waiting for it: one call
  // each, the same graph and input shape (whose plans the worker holds, still
  // current), and neither input nor output staged through the worker's
  // pinned buffers. Null otherwise.
  std::unique_ptr<Task> TakeFollower(Device& device, Worker& worker, const Task& leader);
  // Takes the front of `device`'s queue (not empty) to run: counted as
  // running until the worker is done with it. Under the device's lock.
  std::unique_ptr<Task> PopQueuedLocked(Device& device);
  // Queues `task` on the healthy GPU with the least outstanding work, or
  // answers it (UNAVAILABLE: no healthy GPU; RESOURCE_EXHAUSTED: queue full).
  void Route(std::unique_ptr<Task> task);
  // Queues the task's calls as one execution on `worker`'s stream, up to
  // its last event; `behind`: an execution launched earlier may still run
  // there (its buffers and captured graphs are then changed only after it
  // ends). Non-OK: the execution failed (its calls' outcome); OK:
  // `execution->results` says how each call ended so far (a call cancelled
  // before it ran, or whose own copy failed, is not OK).
  absl::Status Launch(Device& device, Worker& worker, Task& task, bool behind,
                      Execution* execution);
  // Waits for a launched execution and copies staged outputs to their calls.
  absl::Status Finish(Worker& worker, Task& task, Execution& execution);
  absl::StatusOr<std::shared_ptr<ConvLayerPlan>> LayerPlan(Device& device, Worker& worker,
                                                           const Graph& graph, size_t layer,
                                                           const ConvLayerProblem& problem);
  // Which pairs of `plans`' layers run as one pointwise pair kernel: entry i
  // is set when layers i and i+1 do. A pair never straddles one of
  // `segment_ends` (a replay still stops there). Races each eligible pair not
  // raced yet on this GPU model (PairChoiceFor), with the plans bound to
  // their buffers at `unfused_places` (TensorPlaces with none fused); `settle`
  // waits for the worker's stream first.
  absl::StatusOr<FusedPairs> FusePairs(
      Device& device, Worker& worker, const Graph& graph,
      const std::vector<ConvLayerProblem>& problems,
      const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
      const std::vector<size_t>& segment_ends, const std::vector<void*>& unfused_places,
      const DeviceWeights& weights, const std::function<absl::Status()>& settle);
  absl::StatusOr<std::shared_ptr<PointwisePairChoice>> PairChoiceFor(
      Device& device, Worker& worker, const Graph& graph, size_t layer,
      const std::vector<ConvLayerProblem>& problems,
      const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
      const std::vector<void*>& unfused_places, const DeviceWeights& weights,
      const std::function<absl::Status()>& settle);
  absl::StatusOr<EngineChoice> SearchEngine(Device& device, Worker& worker,
                                            const ConvLayerProblem& problem,
                                            std::optional<ConvLayerPlan>* searched);
  // After a sticky CUDA error on `device` (once): every GPU stops serving,
  // waiting requests are answered, the failure observer hears of it.
  void MarkFailed(Device& device, const std::string& error);

  const DevicePoolOptions options_;
  std::map<std::string, std::string> versions_;
  std::string policy_;  // engine selection, part of every key
  int cuda_runtime_version_ = 0;  // part of stored engine choices' keys
  std::unique_ptr<PlanStore> store_;
  // The temporary store directory this pool made (no --plan_cache_dir), and
  // removes when it is destroyed; empty otherwise.
  std::string private_store_dir_;
  std::vector<std::unique_ptr<Device>> devices_;
  PlanCache<EngineChoice> choices_;
  PlanCache<ConvLayerPlan> plans_;
  PlanCache<PointwisePairChoice> pair_choices_;

  mutable absl::Mutex graphs_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<GraphResources>> graphs_
      ABSL_GUARDED_BY(graphs_mu_);
  absl::flat_hash_map<std::string, int> graph_refs_ ABSL_GUARDED_BY(graphs_mu_);

  std::atomic<bool> accepting_{true};
  // Where Route's scan for the least loaded GPU starts: advanced per request
  // so that ties (idle GPUs, say) take turns.
  std::atomic<size_t> next_tie_start_{0};
  // Engine searches run in this process (no prober) and their verdicts.
  std::atomic<int64_t> in_process_searches_{0};
  std::atomic<int64_t> in_process_quarantined_{0};
  std::atomic<int64_t> in_process_vetoed_{0};
  // Engine choices taken from the plan store instead of a search.
  std::atomic<int64_t> stored_choices_used_{0};
  // Pointwise pairs raced, and those the kernel won.
  std::atomic<int64_t> pair_races_{0};
  std::atomic<int64_t> pairs_fused_{0};
  // Answers requests for workers (set by Create). Answering (metrics, the
  // response, and gRPC's write, which runs on the thread that finishes the
  // call) took a fifth of a server's CPU at 64 in flight; a worker
  // answering is a worker not feeding its GPU (docs/runtime.md, "The
  // request path under load").
  std::unique_ptr<RequestExecutor> completions_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_DEVICE_POOL_H_
