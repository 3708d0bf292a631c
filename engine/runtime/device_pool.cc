#include "engine/runtime/device_pool.h"

#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "engine/backend.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/captured_layers.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/launch_timer.h"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/cudnn/pointwise_pair_kernel.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/cudnn/programmatic_entry.h"
#include "engine/runtime/device_choice.h"
#include "engine/runtime/guarded_copy.h"
#include "engine/runtime/layer_segments.h"
#include "engine/runtime/prober_protocol.h"
#include "engine/runtime/slice_copies.h"
#include "engine/status_macros.h"
#include "engine/thread_name.h"
#include "spdlog/spdlog.h"

namespace convserve {

struct DevicePool::GraphResources {
  std::shared_ptr<const Graph> graph;
  // By device slot (index into devices_).
  std::vector<std::unique_ptr<DeviceWeights>> weights;
};

namespace {

// Set on the status of a pair race in which the kernel lost the GPU: the
// kernel is quarantined already, and the layers' engines, which ran before
// it without fault, are not to blame.
constexpr char kPairKernelFaulted[] = "convserve/pointwise_pair_faulted";

// The quarantine key of the pointwise pair kernel for layer problems
// `first` and `second`: a pair quarantined on this GPU model runs as its two
// layers.
std::string PairQuarantineKey(const std::string& target_key, const ConvLayerProblem& first,
                              const ConvLayerProblem& second) {
  return absl::StrCat(target_key, "|pointwise_pair|", first.Encode(), "|", second.Encode());
}

// The quarantine keys of the engines of `plans` (one per layer, in order;
// fewer plans than problems is fine): what a fault while running them
// quarantines.
std::vector<std::string> PlanQuarantineKeys(
    const std::string& target_key, const std::vector<ConvLayerProblem>& problems,
    const std::vector<std::shared_ptr<ConvLayerPlan>>& plans) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < plans.size(); ++i) {
    keys.push_back(QuarantineKey(target_key, problems[i], plans[i]->id()));
  }
  return keys;
}

}  // namespace

struct DevicePool::Task {
  // One request, or the requests of a batch (InferBatch), run as one
  // execution with N the sum of theirs.
  std::vector<InferCall> calls;
  // Seconds each call waited in a dynamic batcher (0 when not batched).
  std::vector<double> delays;
  // Formed by a dynamic batcher (statistics count it as a batch).
  bool batched = false;
  // The execution's input shape, once known.
  Shape input_shape;
  // Holds the graph's device weights until the execution is over.
  std::shared_ptr<GraphResources> resources;
  absl::Time accepted;
  int64_t cost = 0;
  // Each layer's problem and plan, once known (held for the whole request:
  // a plan in use is never evicted). A fault report names their engines
  // (Engines) and quarantines them (QuarantineKeys), so the restarted
  // server does not fault the same way; both are formatted only then.
  std::shared_ptr<const std::vector<ConvLayerProblem>> problems;
  std::vector<std::shared_ptr<ConvLayerPlan>> plans;
  // The pairs of layers that run fused (FusePairs), once known; their
  // kernel is named and quarantined with the engines.
  FusedPairs fused;
  // A request of the --testing_fault_graph graph: the hook, not an engine,
  // faults.
  bool fault_hook = false;
  // A pair kernel faulted in its race (kPairKernelFaulted) and is
  // quarantined: no engine is to blame.
  bool pair_faulted = false;

  std::string Engines() const {
    if (fault_hook) return "testing fault hook (--testing_fault_graph)";
    std::string engines;
    for (size_t i = 0; i < plans.size(); ++i) {
      absl::StrAppend(&engines, i == 0 ? "" : ", ", "layers[", i, "] ", plans[i]->id().ToString());
    }
    for (size_t i = 0; i < fused.size(); ++i) {
      if (fused[i] != nullptr) {
        absl::StrAppend(&engines, ", layers[", i, "] and [", i + 1, "] fused (pointwise pair)");
      }
    }
    return engines;
  }
  std::vector<std::string> QuarantineKeys(const std::string& target_key) const {
    if (fault_hook || pair_faulted) return {};
    std::vector<std::string> keys = PlanQuarantineKeys(target_key, *problems, plans);
    for (size_t i = 0; i < fused.size(); ++i) {
      if (fused[i] != nullptr) {
        keys.push_back(PairQuarantineKey(target_key, (*problems)[i], (*problems)[i + 1]));
      }
    }
    return keys;
  }

  // Answers every call with `status` (refused, or no GPU to run it).
  void Fail(const absl::Status& status) {
    for (InferCall& call : calls) call.done(status, {}, {});
  }
};

// One task's execution from its launch to its end (Launch, Finish).
struct DevicePool::Execution {
  // Non-OK: the execution failed; OK: `results` says how each call ended.
  absl::Status status;
  std::vector<absl::Status> results;
  InferTimings timings;
  // Which of the worker's two event sets it records.
  int events = 0;
  // Calls not cancelled before it ran; each one's slice of the output.
  std::vector<size_t> live;
  std::vector<size_t> out_offset, call_out_bytes;
  bool input_in_place = false;
  bool output_in_place = false;
  double stage_in = 0;
  // The captured graph it replays, held until it ends: the cache may drop
  // the graph meanwhile.
  std::shared_ptr<CapturedLayers> captured;
  // Whether its layers went on the stream in one segment (LayerSegmentEnds).
  // A request of more segments waits for its earlier ones inside Launch, so
  // one launched behind it would hold back its answer by that long.
  bool one_segment = false;
};

// One warm-up of one execution shape, shared by the workers that build its
// plans and the thread waiting in Warm.
struct DevicePool::WarmJob {
  std::shared_ptr<const Graph> graph;
  Shape input_shape;
  std::vector<Shape> layer_outputs;
  CancelCheck cancelled;
  absl::Mutex mu;
  // Workers that have not finished the job yet.
  int pending ABSL_GUARDED_BY(mu) = 0;
  // The first failure of any worker.
  absl::Status status ABSL_GUARDED_BY(mu);

  void Finish(const absl::Status& result) {
    absl::MutexLock lock(&mu);
    if (status.ok()) status = result;
    --pending;
  }
};

// One worker thread's own CUDA and cuDNN state. Touched only by its thread,
// but for `warm_jobs`.
struct DevicePool::Worker {
  int index = 0;
  CudaStream stream;
  CudnnHandle handle;
  // Two sets of timing events: an execution launched ahead of the last
  // one's end (RunTask) times itself with the set the last one does not use.
  CudaEvent events[2][4];
  CudaEvent layer_done;
  DeviceBuffer input, ping, pong, workspace;
  PinnedBuffer staging_in, staging_out;
  // Requests captured on this worker's stream; cleared whenever one of the
  // device buffers above is reallocated (captures hold their addresses).
  std::unique_ptr<CudaGraphCache<CapturedLayers>> graphs;
  // The layer problems and plans of the last execution shape this worker
  // ran: the next execution of the same graph and input shape takes them
  // from here instead of one plan cache lookup per layer, while the cache's
  // generation says it has let go of nothing since.
  struct LastPlans {
    std::string graph_id;
    Shape input_shape;
    uint64_t generation = 0;
    std::shared_ptr<const std::vector<ConvLayerProblem>> problems;
    std::vector<std::shared_ptr<ConvLayerPlan>> plans;
    FusedPairs fused;
  } last_plans;
  // Warm-up jobs for this worker (plans are per worker), taken before the
  // device's queue. Guarded by the device's `mu`.
  std::deque<std::shared_ptr<WarmJob>> warm_jobs;
  std::thread thread;
};

struct DevicePool::Device {
  int ordinal = 0;
  int slot = 0;
  std::string name;
  std::string uuid;
  CudnnTarget target;
  // Runs this GPU's engine searches; null when they run in-process.
  std::unique_ptr<EngineProber> prober;
  absl::Mutex mu;
  std::deque<std::unique_ptr<Task>> queue ABSL_GUARDED_BY(mu);
  // queue.size(), for the polling worker (read without mu).
  std::atomic<size_t> queued{0};
  // One worker at a time polls (options worker_spin).
  std::atomic<bool> polling{false};
  int running ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // Input + output bytes of requests queued or running: the scheduler's
  // measure of outstanding work.
  std::atomic<int64_t> outstanding{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> failed{0};
  // Requests launched before their worker had seen its previous one end.
  std::atomic<int64_t> launched_ahead{0};
  // Set by the first sticky CUDA error on any GPU of the process: CUDA then
  // fails all further work of the process.
  std::atomic<bool> lost{false};
  // The sticky error happened on this GPU.
  std::atomic<bool> faulted{false};
  std::vector<std::unique_ptr<Worker>> workers;
};

namespace {

// GPU work a worker queues before it waits and checks for cancellation: a
// cancelled request stops within about this much work plus one layer.
constexpr double kMaxQueuedAheadMs = 2.0;
// For layers no search timed: a low estimate of the GPU's rate, so the
// estimate errs towards waiting more often on big layers.
constexpr double kAssumedMacsPerMs = 20e9;
// Samples each side of a pointwise pair's race takes (LaunchTimer).
constexpr int kPairRaceRounds = 5;

// Grows `buffer` to at least `bytes` (never shrinks: a worker's buffers
// settle at the largest request it has served); sets `*moved` when it was
// reallocated.
template <typename Buffer>
absl::Status Grow(Buffer* buffer, size_t bytes, bool* moved = nullptr) {
  if (buffer->bytes() >= bytes) return absl::OkStatus();
  ASSIGN_OR_RETURN(*buffer, Buffer::Create(bytes));
  if (moved != nullptr) *moved = true;
  return absl::OkStatus();
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// A hint to the core that this thread is polling.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A worker's device buffers for `layers` layers and the least size of each:
// the input (0 when a CUDA region is read in place), the ping-pong
// activations (pong only for more than one layer) and the workspace.
using LayerBufferNeedList = std::array<std::pair<DeviceBuffer*, size_t>, 4>;
template <typename Worker>
LayerBufferNeedList LayerBufferNeeds(Worker& worker, size_t in_bytes, size_t activation_bytes,
                                     size_t layers, int64_t workspace, bool input_in_place) {
  return {{{&worker.input, input_in_place ? 0 : in_bytes},
           {&worker.ping, activation_bytes},
           {&worker.pong, layers > 1 ? activation_bytes : 0},
           {&worker.workspace, static_cast<size_t>(workspace)}}};
}

// Grows each buffer of `needs` to its size; sets `*moved` when one was
// reallocated (captured graphs hold their addresses).
absl::Status GrowLayerBuffers(const LayerBufferNeedList& needs, bool* moved) {
  for (const auto& [buffer, bytes] : needs) RETURN_IF_ERROR(Grow(buffer, bytes, moved));
  return absl::OkStatus();
}

// Whether GrowLayerBuffers would reallocate none of the buffers of `needs`.
bool LayerBuffersFit(const LayerBufferNeedList& needs) {
  return std::all_of(needs.begin(), needs.end(),
                     [](const auto& need) { return need.first->bytes() >= need.second; });
}

// Where each layer's input and output live (entry i: layer i's input;
// the last entry: the last layer's output). The first layer reads
// `first_input` (only read: the const is cast away to share the vector);
// each tensor that is written takes ping and pong in turn; the last layer
// writes `last_output` when not null (a CUDA region in place). The output of
// the first layer of a fused pair (`fused[i]` set) is never written: it gets
// no buffer, and the pair reads entry i and writes entry i + 2, never the
// same buffer.
template <typename Worker>
std::vector<void*> TensorPlaces(const Worker& worker, size_t layers, const void* first_input,
                                void* last_output, const FusedPairs& fused) {
  std::vector<void*> places(layers + 1, nullptr);
  places[0] = const_cast<void*>(first_input);
  size_t written = 0;
  for (size_t t = 1; t <= layers; ++t) {
    if (fused[t - 1] != nullptr) continue;
    places[t] = t == layers && last_output != nullptr
                    ? last_output
                    : (written % 2 == 0 ? worker.ping.data() : worker.pong.data());
    ++written;
  }
  return places;
}

// Layer i's buffers, its tensors at `places` (TensorPlaces).
ConvLayerBuffers LayerBuffers(const std::vector<void*>& places, const DeviceWeights& weights,
                              void* workspace, size_t i) {
  ConvLayerBuffers b;
  b.x = places[i];
  b.y = places[i + 1];
  b.w = weights.weights(i);
  b.w_tf32 = weights.tf32_weights(i);
  b.w_narrow = weights.narrow_weights(i);
  b.bias = weights.bias(i);
  b.workspace = workspace;
  return b;
}

// The fused pair of layers i and i + 1, its tensors at `places`.
PointwisePairBuffers PairBuffers(const std::vector<void*>& places, const DeviceWeights& weights,
                                 size_t i) {
  PointwisePairBuffers b;
  b.x = places[i];
  b.w0 = weights.weights(i);
  b.bias0 = weights.bias(i);
  b.w1 = weights.weights(i + 1);
  b.bias1 = weights.bias(i + 1);
  b.y = places[i + 2];
  return b;
}

// The key of a choice shared by every graph, worker and GPU of one model
// (`policy` names the selection and the model): `id` names what is chosen
// for, `problem` its (first) layer problem.
PlanKey ModelKey(std::string id, const ConvLayerProblem& problem, std::string policy) {
  PlanKey key;
  key.graph_id = std::move(id);
  key.layer = -1;
  key.input_shape = problem.input;
  key.dtype = problem.dtype;
  key.device = -1;
  key.worker = -1;
  key.policy = std::move(policy);
  return key;
}

// Whether layer i runs as the second half of a fused pair (not on its own).
bool FusedIntoPrevious(const FusedPairs& fused, size_t i) {
  return i > 0 && fused[i - 1] != nullptr;
}

absl::StatusOr<double> ElapsedSeconds(const CudaEvent& from, const CudaEvent& to) {
  float ms = 0;
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return ms / 1e3;
}

// `entered`: autotune times the cuDNN plans it keeps entered programmatically
// (SearchOptions::programmatic_entry), so it may choose otherwise.
std::string PolicyName(const EngineSelection& s, bool entered) {
  return absl::StrCat(EngineSearchName(s.search), s.deterministic_only ? "/deterministic" : "",
                      s.strict_float32 ? "/strict" : "/tf32",
                      s.direct_kernels ? absl::StrCat("/direct", kDirectPathRevision) : "",
                      "/ws", s.max_workspace_bytes,
                      s.search == EngineSearch::kAutotune
                          ? absl::StrCat("/n", s.autotune_candidates, "/k",
                                         s.autotune_knob_candidates)
                          : "",
                      s.blocklist.empty() ? "" : absl::StrCat("/blocked", s.blocklist.size()),
                      s.search == EngineSearch::kAutotune && entered ? "/entry" : "");
}

absl::StatusOr<std::string> PrivateStoreDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/convserve-plans-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a temporary plan store: ", std::strerror(errno)));
  }
  return pattern;
}

// Records which candidate an in-process search is running, so a fault that
// kills the context can still be blamed on it; vetoes quarantined ones.
class InProcessObserver : public SearchObserver {
 public:
  InProcessObserver(PlanStore* store, std::string target_key, const ConvLayerProblem& problem)
      : store_(store), target_key_(std::move(target_key)), problem_(problem) {}
  std::optional<std::string> Quarantined(const EngineConfigId& id) override {
    return store_->Get("quarantine", QuarantineKey(target_key_, problem_, id));
  }
  void OnTry(const EngineConfigId& id) override { in_flight_ = id; }
  void OnResult(const CandidateResult& result) override {
    in_flight_.reset();
    if (!result.ok && result.detail.rfind("quarantined", 0) == 0) ++vetoed_;
  }
  const std::optional<EngineConfigId>& in_flight() const { return in_flight_; }
  int64_t vetoed() const { return vetoed_; }

 private:
  PlanStore* store_;
  const std::string target_key_;
  const ConvLayerProblem& problem_;
  std::optional<EngineConfigId> in_flight_;
  int64_t vetoed_ = 0;
};

}  // namespace

DevicePool::DevicePool(const DevicePoolOptions& options)
    : options_(options),
      policy_(PolicyName(options.selection, options.cuda_graphs && ProgrammaticEntryEnabled())),
      choices_(options.plan_cache),
      plans_(options.plan_cache),
      pair_choices_(options.plan_cache) {}

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(const DevicePoolOptions& options) {
  if (options.workers_per_device < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers per GPU must be >= 1, got ", options.workers_per_device));
  }
  if (options.max_queued_per_device < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the per-GPU queue must hold >= 1, got ",
                                                   options.max_queued_per_device));
  }
  if (options.cuda_graph_cache.max_entries < 1 || options.cuda_graph_cache.max_variants < 1 ||
      options.cuda_graph_cache.max_seen < 1) {
    return absl::InvalidArgumentError("the CUDA graph cache bounds must be >= 1");
  }
  std::vector<int> ordinals = options.devices;
  if (ordinals.empty()) {
    for (int d = 0; d < CudaDeviceCount(); ++d) ordinals.push_back(d);
  }
  if (ordinals.empty()) return absl::FailedPreconditionError("no CUDA device is visible");
  DevicePoolOptions resolved = options;
  if (resolved.selection.errata == nullptr) {
    ASSIGN_OR_RETURN(resolved.selection.errata, CudnnErrata::Create(resolved.errata_file));
  }
  std::unique_ptr<DevicePool> pool(new DevicePool(resolved));
  // Request and response bytes in page-locked memory, for every GPU
  // (portable): copies to and from the GPUs are direct DMA.
  HostBufferPoolOptions host_buffers;
  host_buffers.allocate = [](size_t bytes) -> void* {
    void* data = nullptr;
    return cudaHostAlloc(&data, bytes, cudaHostAllocPortable) == cudaSuccess ? data : nullptr;
  };
  host_buffers.release = [](void* data) { cudaFreeHost(data); };
  host_buffers.pinned = true;
  pool->set_host_buffer_pool(HostBufferPool::Create(std::move(host_buffers)));
  std::string store_directory = options.plan_cache_dir;
  if (store_directory.empty()) {
    ASSIGN_OR_RETURN(store_directory, PrivateStoreDirectory());
    pool->private_store_dir_ = store_directory;
    spdlog::info("no --plan_cache_dir: engine choices and quarantine verdicts are kept in {} for "
                 "this process only",
                 store_directory);
  }
  ASSIGN_OR_RETURN(pool->store_, PlanStore::Open(store_directory));
  CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&pool->cuda_runtime_version_));
  for (size_t slot = 0; slot < ordinals.size(); ++slot) {
    ASSIGN_OR_RETURN(CudnnVersions versions, CheckCudnnRuntime(ordinals[slot]));
    auto device = std::make_unique<Device>();
    device->ordinal = ordinals[slot];
    device->slot = static_cast<int>(slot);
    device->name = versions.device_name;
    device->target = versions.target();
    cudaDeviceProp properties;
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device->ordinal));
    device->uuid = "GPU-";
    for (int i = 0; i < 16; ++i) {
      absl::StrAppend(&device->uuid, absl::Hex(static_cast<uint8_t>(properties.uuid.bytes[i]),
                                               absl::kZeroPad2),
                      i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
    }
    if (slot == 0) {
      spdlog::info("{}", versions.ToString());
      pool->versions_ = {{"cudnn_runtime", VersionString(versions.runtime_cudnn, true)},
                         {"cudnn_compiled", VersionString(versions.compiled_cudnn, true)},
                         {"cuda_runtime", VersionString(versions.runtime_cuda, false)},
                         {"cuda_driver", VersionString(versions.driver_cuda, false)},
                         {"backend", "cudnn"}};
    }
    if (!options.prober_binary.empty()) {
      ProberLaunch launch;
      launch.device = device->ordinal;
      launch.selection = resolved.selection;
      launch.errata_file = options.errata_file;
      launch.store_directory = store_directory;
      launch.testing_fault_rank = options.testing_fault_candidate_rank;
      launch.log_level = options.prober_log_level;
      launch.dependent_launch = DependentLaunchEnabled();
      launch.programmatic_entry = options.cuda_graphs && ProgrammaticEntryEnabled();
      EngineProberOptions prober;
      prober.binary = options.prober_binary;
      prober.arguments = ProberArguments(launch);
      prober.candidate_timeout = options.prober_candidate_timeout;
      prober.idle_timeout = options.prober_idle_timeout;
      prober.label = absl::StrCat("GPU ", device->ordinal);
      ASSIGN_OR_RETURN(device->prober, EngineProber::Create(prober, pool->store_.get()));
    }
    // NVIDIA's advice for per-thread handles: one synchronous cudnnCreate
    // first, then each thread creates its own.
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device->ordinal));
    ASSIGN_OR_RETURN(CudnnHandle first, CudnnHandle::Create(nullptr));
    for (int w = 0; w < options.workers_per_device; ++w) {
      auto worker = std::make_unique<Worker>();
      worker->index = w;
      CUDA_RETURN_IF_ERROR(cudaSetDevice(device->ordinal));
      ASSIGN_OR_RETURN(worker->stream, CudaStream::Create());
      ASSIGN_OR_RETURN(worker->handle, CudnnHandle::Create(worker->stream.get()));
      for (auto& set : worker->events) {
        for (CudaEvent& event : set) {
          ASSIGN_OR_RETURN(event, CudaEvent::Create());
        }
      }
      ASSIGN_OR_RETURN(worker->layer_done, CudaEvent::Create());
      worker->graphs =
          std::make_unique<CudaGraphCache<CapturedLayers>>(options.cuda_graph_cache);
      device->workers.push_back(std::move(worker));
    }
    pool->devices_.push_back(std::move(device));
  }
  RequestExecutorOptions completions;
  completions.threads = options.completion_threads > 0
                            ? options.completion_threads
                            : options.workers_per_device * static_cast<int>(pool->devices_.size());
  // Never full: what waits there is bounded by the requests in flight.
  completions.max_queued = std::numeric_limits<int>::max();
  completions.thread_name = "cs-answer";
  pool->completions_ = std::make_unique<RequestExecutor>(completions);
  for (auto& device : pool->devices_) {
    for (auto& worker : device->workers) {
      worker->thread = std::thread(&DevicePool::WorkerLoop, pool.get(), device.get(), worker.get());
    }
  }
  return pool;
}

DevicePool::~DevicePool() {
  Drain();
  for (auto& device : devices_) {
    absl::MutexLock lock(&device->mu);
    device->stopping = true;
  }
  for (auto& device : devices_) {
    for (auto& worker : device->workers) {
      if (worker->thread.joinable()) worker->thread.join();  // Create may have failed early
    }
    device->prober.reset();  // stops the process before its store goes
  }
  completions_.reset();  // idle since Drain; before the members its answers use
  if (!private_store_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(private_store_dir_, ignored);
  }
}

std::string DevicePool::Describe() const {
  std::vector<std::string> gpus;
  for (const auto& device : devices_) gpus.push_back(absl::StrCat(device->ordinal, " ", device->name));
  return absl::StrCat("GPU device pool: ", absl::StrJoin(gpus, ", "), "; ",
                      options_.workers_per_device, " workers per GPU; engine selection ",
                      policy_, "; ", options_.selection.errata->size(), " cuDNN errata rules; ",
                      options_.prober_binary.empty()
                          ? "engine searches IN-PROCESS (no prober: a faulting candidate "
                            "loses the GPU)"
                          : absl::StrCat("engine searches in ", options_.prober_binary),
                      "; plan store ", store_->directory(), "; CUDA graphs ",
                      options_.cuda_graphs
                          ? absl::StrCat("on (", options_.cuda_graph_cache.max_entries,
                                         " per worker)")
                          : "off (--cuda_graphs=false)");
}

bool DevicePool::healthy() const {
  return std::any_of(devices_.begin(), devices_.end(),
                     [](const auto& device) { return !device->lost.load(); });
}

absl::Status DevicePool::AddGraph(const std::shared_ptr<const Graph>& graph) {
  {
    absl::MutexLock lock(&graphs_mu_);
    auto it = graph_refs_.find(graph->id());
    if (it != graph_refs_.end()) {
      ++it->second;
      return absl::OkStatus();
    }
  }
  // Upload outside the lock: traffic for other graphs goes on meanwhile.
  auto resources = std::make_shared<GraphResources>();
  resources->graph = graph;
  for (const auto& device : devices_) {
    if (device->lost.load()) {
      resources->weights.push_back(nullptr);
      continue;
    }
    absl::StatusOr<std::unique_ptr<DeviceWeights>> weights =
        DeviceWeights::Upload(*graph, device->ordinal, !options_.selection.strict_float32);
    if (!weights.ok() && IsStickyCudaError(CudaErrorOf(weights.status()))) {
      // The GPU was lost: the graph is served by the others.
      MarkFailed(*device, absl::StrCat("uploading graph '", graph->name(), "': ",
                                       weights.status().message()));
      resources->weights.push_back(nullptr);
      continue;
    }
    if (!weights.ok()) {
      return absl::Status(weights.status().code(),
                          absl::StrCat("uploading graph '", graph->name(), "' to GPU ",
                                       device->ordinal, ": ", weights.status().message()));
    }
    resources->weights.push_back(*std::move(weights));
  }
  absl::MutexLock lock(&graphs_mu_);
  if (++graph_refs_[graph->id()] == 1) graphs_[graph->id()] = std::move(resources);
  return absl::OkStatus();
}

void DevicePool::RemoveGraph(const std::string& graph_id) {
  {
    absl::MutexLock lock(&graphs_mu_);
    auto it = graph_refs_.find(graph_id);
    if (it == graph_refs_.end() || --it->second > 0) return;
    graph_refs_.erase(it);
    // Queued and running requests hold the resources until they finish.
    graphs_.erase(graph_id);
  }
  plans_.EraseIf([&](const PlanKey& key) { return key.graph_id == graph_id; });
  // Captures of the graph go too (they would be stale anyway: they hold its
  // weights only weakly), so an unloaded graph keeps no executable graphs.
  for (const auto& device : devices_) {
    for (const auto& worker : device->workers) worker->graphs->EraseGraph(graph_id);
  }
}

CudaGraphStats DevicePool::cuda_graph_stats() const {
  CudaGraphStats stats;
  for (const auto& device : devices_) {
    for (const auto& worker : device->workers) stats.Add(worker->graphs->stats());
  }
  return stats;
}

void DevicePool::Submit(InferCall call) {
  std::vector<InferCall> calls;
  calls.push_back(std::move(call));
  Enqueue(std::move(calls), {}, false);
}

void DevicePool::SubmitBatch(InferBatch batch) {
  Enqueue(std::move(batch.calls), std::move(batch.delays), true);
}

int DevicePool::concurrency() const {
  int workers = 0;
  for (const auto& device : devices_) {
    if (!device->lost.load()) workers += static_cast<int>(device->workers.size());
  }
  return workers;
}

void DevicePool::Enqueue(std::vector<InferCall> calls, std::vector<double> delays, bool batched) {
  auto task = std::make_unique<Task>();
  task->calls = std::move(calls);
  task->delays = std::move(delays);
  task->delays.resize(task->calls.size(), 0.0);
  task->batched = batched;
  if (task->calls.empty()) return;
  if (!accepting_.load()) {
    task->Fail(absl::UnavailableError("the server is shutting down"));
    return;
  }
  const std::shared_ptr<const Graph>& graph = task->calls.front().graph;
  task->resources = Resources(graph->id());
  if (task->resources == nullptr) {
    task->Fail(absl::NotFoundError(
        absl::StrCat("graph '", graph->name(), "' was unloaded before the request ran")));
    return;
  }
  const int64_t element = static_cast<int64_t>(DTypeSize(graph->spec().dtype));
  for (const InferCall& call : task->calls) {
    if (call.graph->id() != graph->id()) {
      task->Fail(absl::InternalError("a batch joined requests of different graphs"));
      return;
    }
    if (call.layer_outputs.size() != graph->spec().layers.size()) {
      task->Fail(absl::InternalError("the call's layer output shapes were not inferred"));
      return;
    }
    task->cost += (NumElements(call.input_shape) + NumElements(call.layer_outputs.back())) * element;
  }
  task->accepted = absl::Now();
  Route(std::move(task));
}

void DevicePool::Route(std::unique_ptr<Task> task) {
  const int64_t cost = task->cost;
  // A GPU can be lost between the pick and the queueing: then pick again.
  for (size_t attempt = 0; attempt <= devices_.size(); ++attempt) {
    // Least outstanding work among healthy GPUs; ties in turn.
    absl::InlinedVector<DeviceLoad, 8> loads;
    for (const auto& device : devices_) {
      loads.push_back(DeviceLoad{device->outstanding.load(), !device->lost.load()});
    }
    const int picked = LeastLoadedDevice(loads, next_tie_start_.fetch_add(1));
    if (picked < 0) break;
    Device* target = devices_[picked].get();
    bool stopping = false;
    {
      absl::MutexLock lock(&target->mu);
      if (target->lost.load()) continue;
      stopping = target->stopping;
      if (!stopping && static_cast<int>(target->queue.size()) < options_.max_queued_per_device) {
        target->outstanding += cost;
        target->queue.push_back(std::move(task));
        target->queued.store(target->queue.size(), std::memory_order_release);
        return;
      }
    }
    if (stopping) {
      // Its workers have exited (the pool is being destroyed).
      task->Fail(absl::UnavailableError("the server is shutting down"));
      return;
    }
    task->Fail(absl::ResourceExhaustedError(
        absl::StrCat("GPU ", target->ordinal, " has ", options_.max_queued_per_device,
                     " requests waiting (--max_queued_requests); retry later")));
    return;
  }
  task->Fail(absl::UnavailableError(
      "no GPU serves: a CUDA context of this server was lost (see its log); "
      "the server is restarting, retry"));
}

void DevicePool::Drain() {
  accepting_.store(false);
  // A search may take minutes; accepted requests that still need one are
  // answered UNAVAILABLE rather than holding up the shutdown.
  for (auto& device : devices_) {
    if (device->prober != nullptr) device->prober->Cancel();
  }
  for (auto& device : devices_) {
    absl::MutexLock lock(&device->mu);
    device->mu.Await(absl::Condition(
        +[](Device* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu) {
          return d->queue.empty() && d->running == 0;
        },
        device.get()));
  }
  // Answers the workers handed over (RunTask) are sent too.
  if (completions_ != nullptr) completions_->Drain();
}

RunnerStats DevicePool::Stats() const {
  RunnerStats stats;
  for (const auto& device : devices_) {
    DeviceStats d;
    d.device = absl::StrCat(device->ordinal);
    d.uuid = device->uuid;
    d.name = device->name;
    d.completed = device->completed.load();
    d.failed = device->failed.load();
    d.healthy = !device->lost.load();
    d.faults = device->faulted.load() ? 1 : 0;
    d.launched_ahead = device->launched_ahead.load();
    {
      absl::MutexLock lock(&device->mu);
      d.queued = static_cast<int64_t>(device->queue.size());
      d.running = device->running;
    }
    size_t free = 0, total = 0;
    if (d.healthy && cudaSetDevice(device->ordinal) == cudaSuccess &&
        cudaMemGetInfo(&free, &total) == cudaSuccess) {
      d.memory_used_bytes = static_cast<int64_t>(total - free);
      d.memory_total_bytes = static_cast<int64_t>(total);
    }
    stats.devices.push_back(d);
    if (device->prober != nullptr) {
      const EngineProberStats p = device->prober->stats();
      stats.engine_search.prober_starts += p.starts;
      stats.engine_search.quarantined += p.quarantined;
      stats.engine_search.vetoed += p.vetoed;
    }
  }
  stats.engine_search.searches += in_process_searches_.load();
  stats.engine_search.quarantined += in_process_quarantined_.load();
  stats.engine_search.vetoed += in_process_vetoed_.load();
  stats.engine_search.stored_choices = stored_choices_used_.load();
  stats.engine_search.pair_races = pair_races_.load();
  stats.engine_search.pairs_fused = pairs_fused_.load();
  for (const auto& device : devices_) {
    if (device->prober != nullptr) stats.engine_search.searches += device->prober->stats().searches;
  }
  stats.plans = plans_.stats();
  stats.cuda_graphs = cuda_graph_stats();
  stats.versions = versions_;
  return stats;
}

void DevicePool::MarkFailed(Device& device, const std::string& error) {
  // CUDA reports a sticky error to all further CUDA work of the process ("the
  // process must be terminated and relaunched"), not only to the context that
  // faulted: on 2 x H200 (driver 580, CUDA 13), after a misaligned store on
  // GPU 0 the next synchronize on GPU 1 failed with the same error. So one
  // lost context ends service on every GPU of this process; the restart
  // (exit 3) brings them back.
  if (device.faulted.exchange(true)) return;
  bool first = true;
  for (const auto& d : devices_) first = first && !d->lost.load();
  for (const auto& d : devices_) d->lost.store(true);
  if (!first) return;  // another GPU's failure already ended service
  spdlog::critical("GPU {} ({}) lost its CUDA context: {}; CUDA ends every context of the process "
                   "after such an error, so no GPU of this process serves any more",
                   device.ordinal, device.name, error);
  // Waiting requests are answered (there is no GPU left to run them).
  for (const auto& d : devices_) {
    std::deque<std::unique_ptr<Task>> waiting;
    {
      absl::MutexLock lock(&d->mu);
      waiting.swap(d->queue);
      d->queued.store(0, std::memory_order_release);
    }
    for (std::unique_ptr<Task>& task : waiting) {
      d->outstanding -= task->cost;
      Route(std::move(task));
    }
  }
  DeviceFailure failure;
  failure.device = absl::StrCat(device.ordinal);
  failure.error = error;
  failure.healthy_devices = 0;
  ReportDeviceFailure(failure);
}

namespace {

// What a worker waits for: work on its device's queue or its own warm-up
// jobs, or the stop.
template <typename Device, typename Worker>
struct WorkerWake {
  Device* device;
  Worker* worker;
  bool Ready() const ABSL_NO_THREAD_SAFETY_ANALYSIS {  // the caller holds device->mu
    return device->stopping || !device->queue.empty() || !worker->warm_jobs.empty();
  }
};

}  // namespace

void DevicePool::PollQueue(Device& device) {
  if (options_.worker_spin <= absl::ZeroDuration() ||
      device.queued.load(std::memory_order_acquire) > 0 ||
      device.polling.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  const absl::Time until = absl::Now() + options_.worker_spin;
  while (device.queued.load(std::memory_order_acquire) == 0 && accepting_.load() &&
         absl::Now() < until) {
    CpuRelax();
  }
  device.polling.store(false, std::memory_order_release);
}

void DevicePool::WorkerLoop(Device* device, Worker* worker) {
  NameThisThread(absl::StrCat("cs-gpu", device->ordinal, "-w", worker->index));
  cudaSetDevice(device->ordinal);
  const WorkerWake<Device, Worker> wake{device, worker};
  while (true) {
    PollQueue(*device);
    std::unique_ptr<Task> task;
    std::shared_ptr<WarmJob> warm;
    {
      absl::MutexLock lock(&device->mu);
      device->mu.Await(absl::Condition(&wake, &WorkerWake<Device, Worker>::Ready));
      if (!worker->warm_jobs.empty()) {
        warm = std::move(worker->warm_jobs.front());
        worker->warm_jobs.pop_front();
      } else if (device->queue.empty()) {
        return;  // stopping; Warm queues no job once the pool stops accepting
      } else {
        task = PopQueuedLocked(*device);
      }
    }
    if (warm != nullptr) {
      RunWarmJob(*device, *worker, *warm);
      continue;
    }
    if (device->lost.load()) {
      // Queued just before the GPU failed: another GPU runs it.
      device->outstanding -= task->cost;
      Route(std::move(task));
    } else {
      RunTask(*device, *worker, std::move(task));
    }
    absl::MutexLock lock(&device->mu);
    --device->running;
  }
}

namespace {

// A joined execution that failed is run again call by call, unless no call
// could succeed alone either: cancelled, or the GPU (or server) stopped.
bool RetryAlone(const absl::Status& status) {
  return status.code() != absl::StatusCode::kCancelled &&
         status.code() != absl::StatusCode::kUnavailable;
}

}  // namespace

void DevicePool::RunTask(Device& device, Worker& worker, std::unique_ptr<Task> task,
                         bool take_followers) {
  Execution execution;
  execution.status = Launch(device, worker, *task, /*behind=*/false, &execution);
  for (bool follower = false; task != nullptr; follower = true) {
    // The request after this one goes on the stream before this one is
    // waited for, so the GPU runs it without waiting for this thread.
    std::unique_ptr<Task> next;
    Execution next_execution;
    // A follower has this request's graph and shape, so its segments too.
    if (execution.status.ok() && execution.one_segment && take_followers &&
        options_.launch_ahead) {
      next = TakeFollower(device, worker, *task);
    }
    if (next != nullptr) {
      ++device.launched_ahead;
      next_execution.events = 1 - execution.events;
      next_execution.status = Launch(device, worker, *next, /*behind=*/true, &next_execution);
    }
    if (execution.status.ok()) execution.status = Finish(worker, *task, execution);
    Answer(device, worker, std::move(task), execution);
    if (follower) {
      absl::MutexLock lock(&device.mu);
      --device.running;  // counted by TakeFollower
    }
    task = std::move(next);
    execution = std::move(next_execution);
  }
}

void DevicePool::Answer(Device& device, Worker& worker, std::unique_ptr<Task> task,
                        Execution& execution) {
  absl::Status& status = execution.status;
  const std::vector<absl::Status>& results = execution.results;
  const InferTimings& shared = execution.timings;
  // Whether this worker's own context is gone: after a sticky error every
  // call fails with it. (A status may carry a sticky error from another
  // GPU's search; that is not this GPU's loss.)
  const cudaError_t own = status.ok() ? cudaSuccess : cudaStreamSynchronize(worker.stream.get());
  const cudaError_t lost = IsStickyCudaError(own) ? own : cudaSuccess;
  const InferCall& first = task->calls.front();
  if (lost != cudaSuccess || (!status.ok() && device.lost.load())) {
    const std::string engines = task->Engines();
    const std::string error = absl::StrCat(
        lost != cudaSuccess ? cudaGetErrorName(lost) : "context already lost", " while "
        "running graph '", first.graph->name(), "' input ",
        ShapeToString(task->input_shape.empty() ? first.input_shape : task->input_shape),
        engines.empty() ? "" : absl::StrCat(" (", engines, ")"), ": ", status.message());
    if (lost != cudaSuccess && !IsHardwareCudaError(lost)) {
      // Engines that passed the search and then faulted on real data:
      // quarantined, or the restarted server would pick them again.
      const std::vector<std::string> keys = task->QuarantineKeys(device.target.Key());
      for (const std::string& key : keys) {
        store_->Put("quarantine", key, absl::StrCat("faulted while serving: ", error))
            .IgnoreError();
      }
      if (!keys.empty()) {
        spdlog::error("engine configurations quarantined after the fault on GPU {}: {}",
                      device.ordinal, engines);
      }
    }
    MarkFailed(device, error);
    status = absl::UnavailableError(absl::StrCat(
        "GPU ", device.ordinal, " failed while running this request (",
        lost != cudaSuccess ? cudaGetErrorName(lost) : "context lost",
        "); the server stops serving and restarts: retry"));
  }
  std::vector<size_t> live;  // calls whose outcome is the execution's
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) live.push_back(i);
  }
  const int64_t cost = task->cost;
  if (!status.ok() && live.size() > 1 && RetryAlone(status)) {
    // The joined execution failed (e.g. no plan or no memory for the larger
    // N): each call runs alone, as it would have without batching.
    spdlog::warn("batch of {} requests (input {}) of graph '{}' failed on GPU {}: {}; running "
                 "each alone",
                 live.size(), ShapeToString(task->input_shape), first.graph->name(),
                 device.ordinal, status.ToString());
    for (size_t i = 0; i < task->calls.size(); ++i) {
      if (!results[i].ok()) {
        ++device.failed;
        InferTimings timings = shared;
        timings.queue += task->delays[i];
        timings.batch_delay = task->delays[i];
        task->calls[i].done(results[i], {}, timings);
        continue;
      }
      auto alone = std::make_unique<Task>();
      alone->calls.push_back(std::move(task->calls[i]));
      alone->delays.push_back(task->delays[i]);
      alone->batched = task->batched;
      alone->resources = task->resources;
      alone->accepted = task->accepted;
      // Without followers: under steady traffic they could run on and on
      // while the batch's later calls wait for their turn here.
      RunTask(device, worker, std::move(alone), /*take_followers=*/false);
    }
    device.outstanding -= cost;
    return;
  }
  if (status.ok()) {
    ExecutionEvent event;
    event.graph_name = first.graph->name();
    event.graph_id = first.graph->id();
    event.batched = task->batched;
    event.batch_size = task->input_shape.empty() ? 0 : task->input_shape[0];
    event.requests = static_cast<int>(live.size());
    for (size_t i : live) {
      ++event.succeeded;
      event.succeeded_batch += task->calls[i].input_shape[0];
    }
    event.timings = shared;
    if (event.succeeded > 0) ReportExecution(event);
  }
  // The answers of a batch, or of a request while more wait for this GPU,
  // go to the completion threads (in parallel) and this worker takes the
  // next request; a lone request is answered at once, which is sooner than
  // waking a thread.
  const bool hand_over =
      task->calls.size() > 1 || device.queued.load(std::memory_order_acquire) > 0;
  // Plans and device weights are let go on this thread (it has the GPU
  // current), even when the task itself goes on another.
  const std::vector<std::shared_ptr<ConvLayerPlan>> plans = std::move(task->plans);
  const std::shared_ptr<GraphResources> resources = std::move(task->resources);
  std::shared_ptr<Task> answered = std::move(task);  // until its last call is answered
  for (size_t i = 0; i < answered->calls.size(); ++i) {
    InferCall& call = answered->calls[i];
    absl::Status result = !results[i].ok() ? results[i] : status;
    if (!result.ok() && call.output != nullptr) call.output->clear();  // never a partial result
    (result.ok() ? device.completed : device.failed)++;
    InferTimings timings = shared;
    timings.queue += answered->delays[i];
    timings.batch_delay = answered->delays[i];
    if (answered->batched && result.ok()) timings.batch_size = answered->input_shape[0];
    std::function<void()> answer = [answered, &call, result = std::move(result),
                                     timings = std::move(timings)] {
      call.done(result, result.ok() ? call.layer_outputs.back() : Shape(), timings);
    };
    // Refused only after Drain, when no task runs: answered here then.
    if (!hand_over || !completions_->Submit(answer).ok()) answer();
  }
  device.outstanding -= cost;
}

std::shared_ptr<DevicePool::GraphResources> DevicePool::Resources(const std::string& graph_id) {
  absl::MutexLock lock(&graphs_mu_);
  auto it = graphs_.find(graph_id);
  return it == graphs_.end() ? nullptr : it->second;
}

absl::Status DevicePool::Warm(const std::shared_ptr<const Graph>& graph, const Shape& input_shape,
                              const CancelCheck& cancelled) {
  ASSIGN_OR_RETURN(std::vector<Shape> outputs, graph->InferShapes(input_shape));
  auto job = std::make_shared<WarmJob>();
  job->graph = graph;
  job->input_shape = input_shape;
  job->layer_outputs = std::move(outputs);
  job->cancelled = cancelled;
  int queued = 0;
  for (const auto& device : devices_) {
    if (device->lost.load()) continue;  // it serves nothing any more
    absl::MutexLock lock(&device->mu);
    if (device->stopping || !accepting_.load()) break;
    for (const auto& worker : device->workers) {
      {
        absl::MutexLock job_lock(&job->mu);
        ++job->pending;
      }
      worker->warm_jobs.push_back(job);
      ++queued;
    }
  }
  absl::MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(
      +[](WarmJob* j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(j->mu) { return j->pending == 0; },
      job.get()));
  if (!job->status.ok()) return job->status;
  if (queued == 0) {
    return absl::UnavailableError(
        !accepting_.load() ? "the server is shutting down"
                           : "no GPU serves (a CUDA context of this server was lost)");
  }
  return absl::OkStatus();
}

void DevicePool::RunWarmJob(Device& device, Worker& worker, WarmJob& job) {
  const std::vector<ConvLayerProblem> problems =
      MakeLayerProblems(*job.graph, job.input_shape, job.layer_outputs);
  std::vector<std::shared_ptr<ConvLayerPlan>> plans;
  bool launched = false;  // the layers ran (their engines are to blame for a fault)
  const auto run = [&]() -> absl::Status {
    if (device.lost.load()) return absl::OkStatus();  // another GPU's loss: nothing to serve
    for (size_t i = 0; i < problems.size(); ++i) {
      if (job.cancelled && job.cancelled()) return absl::CancelledError("the warm-up was stopped");
      absl::StatusOr<std::shared_ptr<ConvLayerPlan>> plan =
          LayerPlan(device, worker, *job.graph, i, problems[i]);
      if (!plan.ok()) return plan.status();
      plans.push_back(*std::move(plan));
    }
    launched = true;
    return RunLayersOnce(device, worker, *job.graph, job.input_shape, job.layer_outputs,
                         problems, plans);
  };
  absl::Status status = run();
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
    const cudaError_t own = cudaStreamSynchronize(worker.stream.get());
    if (IsStickyCudaError(own)) {
      if (launched && !IsHardwareCudaError(own) &&
          !status.GetPayload(kPairKernelFaulted).has_value()) {
        // As for a request (RunTask): else the restarted server would warm
        // up, and fault, with the same engines again.
        for (const std::string& key : PlanQuarantineKeys(device.target.Key(), problems, plans)) {
          store_->Put("quarantine", key, absl::StrCat("faulted while warming up: ",
                                                      status.message()))
              .IgnoreError();
        }
      }
      MarkFailed(device, absl::StrCat(cudaGetErrorName(own), " while warming up graph '",
                                      job.graph->name(), "' input ",
                                      ShapeToString(job.input_shape), ": ", status.message()));
    }
    status = absl::Status(status.code(), absl::StrCat("on GPU ", device.ordinal, " worker ",
                                                      worker.index, ": ", status.message()));
  }
  job.Finish(status);
}

namespace {

// Queues layers [begin, end) of an execution on `stream`, their tensors at
// `places` (TensorPlaces): each layer's bound plan, or the pair kernel for a
// fused pair starting there; a layer fused into the one before queues
// nothing.
absl::Status RunLayers(cudnnHandle_t handle, cudaStream_t stream,
                       const std::vector<ConvLayerProblem>& problems,
                       const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
                       const FusedPairs& fused, const std::vector<void*>& places,
                       const DeviceWeights& weights, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (FusedIntoPrevious(fused, i)) continue;
    if (fused[i] != nullptr) {
      RETURN_IF_ERROR(LaunchPointwisePair(problems[i], problems[i + 1],
                                          PairBuffers(places, weights, i), fused[i]->grid,
                                          stream));
    } else {
      RETURN_IF_ERROR(plans[i]->RunBound(handle, stream, problems[i]));
    }
  }
  return absl::OkStatus();
}

// Binds each layer's plan that runs on its own to its buffers at `places`.
absl::Status BindLayers(const std::vector<ConvLayerProblem>& problems,
                        const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
                        const FusedPairs& fused, const std::vector<void*>& places,
                        const DeviceWeights& weights, void* workspace) {
  for (size_t i = 0; i < problems.size(); ++i) {
    if (fused[i] != nullptr || FusedIntoPrevious(fused, i)) continue;
    const ConvLayerBuffers buffers = LayerBuffers(places, weights, workspace, i);
    if (!plans[i]->IsBoundTo(buffers)) RETURN_IF_ERROR(plans[i]->Bind(problems[i], buffers));
  }
  return absl::OkStatus();
}

// Where an execution's layers are queued in segments (LayerSegmentEnds): each
// layer's time as its search measured it, or estimated from its MACs.
std::vector<size_t> SegmentEnds(const std::vector<ConvLayerProblem>& problems,
                                const std::vector<std::shared_ptr<ConvLayerPlan>>& plans) {
  std::vector<double> layer_ms;
  for (size_t i = 0; i < problems.size(); ++i) {
    layer_ms.push_back(plans[i]->measured_ms() > 0
                           ? plans[i]->measured_ms()
                           : static_cast<double>(problems[i].MacCount()) / kAssumedMacsPerMs);
  }
  return LayerSegmentEnds(layer_ms, kMaxQueuedAheadMs);
}

}  // namespace

absl::Status DevicePool::RunLayersOnce(Device& device, Worker& worker, const Graph& graph,
                                       const Shape& input_shape,
                                       const std::vector<Shape>& outputs,
                                       const std::vector<ConvLayerProblem>& problems,
                                       const std::vector<std::shared_ptr<ConvLayerPlan>>& plans) {
  const std::shared_ptr<GraphResources> resources = Resources(graph.id());
  // Unloaded meanwhile, or not on this GPU: nothing to warm.
  if (resources == nullptr || resources->weights[device.slot] == nullptr) return absl::OkStatus();
  const size_t element = DTypeSize(graph.spec().dtype);
  int64_t largest = 0;
  for (const Shape& shape : outputs) largest = std::max(largest, NumElements(shape));
  const size_t in_bytes = NumElements(input_shape) * element;
  int64_t workspace = 0;
  for (const auto& plan : plans) workspace = std::max(workspace, plan->workspace_bytes());
  bool moved = false;
  RETURN_IF_ERROR(GrowLayerBuffers(LayerBufferNeeds(worker, in_bytes, largest * element,
                                                    problems.size(), workspace,
                                                    /*input_in_place=*/false),
                                   &moved));
  if (moved) worker.graphs->Clear();
  cudaStream_t stream = worker.stream.get();
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(worker.input.data(), 0, in_bytes, stream));
  const DeviceWeights& weights = *resources->weights[device.slot];
  // Every layer once on its own, then the pairs that race: each pair's
  // kernel is loaded and its race run here, not at the first request.
  const FusedPairs none(problems.size());
  const std::vector<void*> unfused =
      TensorPlaces(worker, problems.size(), worker.input.data(), nullptr, none);
  RETURN_IF_ERROR(BindLayers(problems, plans, none, unfused, weights, worker.workspace.data()));
  RETURN_IF_ERROR(RunLayers(worker.handle.get(), stream, problems, plans, none, unfused, weights,
                            0, problems.size()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  ASSIGN_OR_RETURN(
      const FusedPairs fused,
      FusePairs(device, worker, graph, problems, plans, SegmentEnds(problems, plans),
                unfused, weights, [] { return absl::OkStatus(); }));
  if (std::any_of(fused.begin(), fused.end(), [](const auto& pair) { return pair != nullptr; })) {
    const std::vector<void*> places =
        TensorPlaces(worker, problems.size(), worker.input.data(), nullptr, fused);
    RETURN_IF_ERROR(BindLayers(problems, plans, fused, places, weights, worker.workspace.data()));
    RETURN_IF_ERROR(RunLayers(worker.handle.get(), stream, problems, plans, fused, places,
                              weights, 0, problems.size()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineChoice> DevicePool::SearchEngine(Device& device, Worker& worker,
                                                      const ConvLayerProblem& problem,
                                                      std::optional<ConvLayerPlan>* searched) {
  if (!accepting_.load()) {
    return absl::UnavailableError(
        "the server is shutting down and this layer shape has no plan yet");
  }
  SearchReport report;
  if (device.prober != nullptr) {
    ASSIGN_OR_RETURN(report, device.prober->Search(problem));
  } else {
    ++in_process_searches_;
    ConvLayerPlanner planner(worker.handle.get(), options_.selection, device.target);
    InProcessObserver observer(store_.get(), device.target.Key(), problem);
    SearchOptions search;
    search.testing_fault_rank = options_.testing_fault_candidate_rank;
    search.programmatic_entry = options_.cuda_graphs && ProgrammaticEntryEnabled();
    absl::StatusOr<SearchReport> found =
        SearchEngines(planner, worker.stream.get(), problem, search, &observer, searched);
    in_process_vetoed_ += observer.vetoed();
    if (!found.ok()) {
      if (StickyCudaError(found.status(), worker.stream.get()) != cudaSuccess &&
          observer.in_flight().has_value()) {
        // This process lost the GPU; the next one must not repeat it.
        const EngineConfigId& id = *observer.in_flight();
        ++in_process_quarantined_;
        absl::Status stored =
            store_->Put("quarantine", QuarantineKey(device.target.Key(), problem, id),
                        absl::StrCat("faulted in-process: ", found.status().message()));
        spdlog::error("engine candidate {} quarantined on GPU {} for {}: {}{}", id.ToString(),
                      device.ordinal, problem.Describe(), std::string(found.status().message()),
                      stored.ok() ? "" : absl::StrCat(" (not persisted: ", stored.message(), ")"));
      }
      const cudaError_t lost = StickyCudaError(found.status(), worker.stream.get());
      if (lost != cudaSuccess) {
        // This GPU is lost. The status goes to every request waiting for
        // this choice, on other GPUs too: it must not carry the CUDA error,
        // or their workers would think their own GPU lost.
        MarkFailed(device, absl::StrCat(cudaGetErrorName(lost), " during an in-process engine "
                                        "search for ", problem.Describe(), ": ",
                                        found.status().message()));
        return absl::UnavailableError(absl::StrCat(
            "GPU ", device.ordinal, " was lost during the engine search for this layer (",
            cudaGetErrorName(lost), "); retry"));
      }
      return found.status();
    }
    report = *std::move(found);
  }
  EngineChoice choice;
  choice.ranked = report.Ranked();
  if (choice.ranked.empty()) {
    return absl::UnimplementedError(absl::StrCat("no cuDNN engine runs layer ",
                                                 problem.Describe(), ": ", report.Summary()));
  }
  for (const CandidateResult& result : report.results) {
    if (result.id == choice.ranked.front()) choice.best_ms = result.ms;
  }
  return choice;
}

absl::StatusOr<std::shared_ptr<ConvLayerPlan>> DevicePool::LayerPlan(
    Device& device, Worker& worker, const Graph& graph, size_t layer,
    const ConvLayerProblem& problem) {
  PlanKey key;
  key.graph_id = graph.id();
  key.layer = static_cast<int>(layer);
  key.input_shape = problem.input;
  key.dtype = problem.dtype;
  key.layout = graph.spec().layout;
  key.device = device.ordinal;
  key.worker = worker.index;
  key.policy = policy_;
  return plans_.GetOrBuild(key, [&]() -> absl::StatusOr<PlanCache<ConvLayerPlan>::Built> {
    const absl::Time build_start = absl::Now();
    PlanBuildEvent event;
    event.device = absl::StrCat(device.ordinal);
    event.ok = false;
    event.path = "none";
    // Reported however the build ends.
    struct Reporter {
      const DevicePool* pool;
      PlanBuildEvent* event;
      absl::Time start;
      ~Reporter() {
        event->seconds = absl::ToDoubleSeconds(absl::Now() - start);
        pool->ReportPlanBuild(*event);
      }
    } reporter{this, &event, build_start};
    // The choice is shared by every graph, worker and GPU of this model
    // with the same layer problem.
    const PlanKey choice_key = ModelKey(absl::StrCat("problem:", problem.Encode()), problem,
                                        absl::StrCat(policy_, "/", device.target.Key()));
    std::optional<ConvLayerPlan> searched;
    ASSIGN_OR_RETURN(
        std::shared_ptr<EngineChoice> choice,
        choices_.GetOrBuild(choice_key, [&]() -> absl::StatusOr<PlanCache<EngineChoice>::Built> {
          const absl::Time start = absl::Now();
          const EngineChoiceStore stored_choices(store_.get(), device.target,
                                                 cuda_runtime_version_, policy_,
                                                 &options_.selection);
          std::vector<std::string> dropped;
          std::optional<EngineChoice> stored = stored_choices.Load(problem, &dropped);
          if (!dropped.empty()) {
            spdlog::warn("plan store: the stored engine choice for {} on GPU {} lost {}",
                         problem.Describe(), device.ordinal, absl::StrJoin(dropped, ", "));
          }
          if (stored.has_value()) {
            ++stored_choices_used_;
            spdlog::info("engine chosen: graph '{}' layers[{}] {} on GPU {}: {}, {} passed, "
                         "from the plan store",
                         graph.name(), layer, problem.Describe(), device.ordinal,
                         stored->ranked.front().ToString(), stored->ranked.size());
            return PlanCache<EngineChoice>::Built{
                std::make_shared<EngineChoice>(*std::move(stored)), sizeof(EngineChoice)};
          }
          ASSIGN_OR_RETURN(EngineChoice found, SearchEngine(device, worker, problem, &searched));
          if (absl::Status saved = stored_choices.Save(problem, found); !saved.ok()) {
            spdlog::warn("plan store: the engine choice for {} is not persisted: {}",
                         problem.Describe(), std::string(saved.message()));
          }
          spdlog::info("engine chosen: graph '{}' layers[{}] {} on GPU {}: {}{}, {} passed, {} "
                       "search {} in {:.1f} ms",
                       graph.name(), layer, problem.Describe(), device.ordinal,
                       found.ranked.front().ToString(),
                       found.best_ms > 0 ? absl::StrFormat(" (%.4f ms)", found.best_ms) : "",
                       found.ranked.size(), EngineSearchName(options_.selection.search),
                       device.prober != nullptr ? "in prober" : "in-process",
                       absl::ToDoubleMilliseconds(absl::Now() - start));
          return PlanCache<EngineChoice>::Built{std::make_shared<EngineChoice>(std::move(found)),
                                                sizeof(EngineChoice)};
        }));
    std::optional<ConvLayerPlan> plan;
    // The plan an in-process search returns was tested for programmatic
    // entry there (SearchOptions::programmatic_entry).
    const bool entry_tested = searched.has_value() && searched->id() == choice->ranked.front();
    if (entry_tested) {
      plan = std::move(searched);
    } else {
      std::string reasons;
      ConvLayerPlanner planner(worker.handle.get(), options_.selection, device.target);
      for (const EngineConfigId& id : choice->ranked) {
        absl::StatusOr<ConvLayerPlan> built = planner.BuildConfig(problem, id);
        if (built.ok()) {
          built->set_measured_ms(id == choice->ranked.front() ? choice->best_ms : 0);
          plan = *std::move(built);
          break;
        }
        absl::StrAppend(&reasons, "; ", id.ToString(), ": ", built.status().message());
      }
      if (!plan.has_value()) {
        return absl::InternalError(absl::StrCat("no engine the search passed builds here for ",
                                                problem.Describe(), reasons));
      }
    }
    // Only captured graphs enter a plan programmatically.
    if (options_.cuda_graphs && plan->path() != LayerPath::kDirect && !entry_tested) {
      absl::StatusOr<EntryVerdict> entry =
          AdmitProgrammaticEntry(*plan, problem, worker.handle.get(), worker.stream.get());
      if (!entry.ok()) {
        if (StickyCudaError(entry.status(), worker.stream.get()) != cudaSuccess) {
          return entry.status();
        }
        spdlog::warn("programmatic entry not tested for {} ({}) on GPU {} worker {}: {}",
                     problem.Describe(), plan->id().ToString(), device.ordinal, worker.index,
                     std::string(entry.status().message()));
      } else {
        spdlog::info("programmatic entry {} for {} ({}) on GPU {} worker {}: {}",
                     entry->admitted ? "admitted" : "refused", problem.Describe(),
                     plan->id().ToString(), device.ordinal, worker.index, entry->detail);
      }
    }
    event.ok = true;
    event.path = LayerPathName(plan->path());
    // Host descriptors are small next to the workspace the plan will need.
    constexpr int64_t kPlanHostBytes = 16 << 10;
    const int64_t bytes = plan->workspace_bytes() + kPlanHostBytes;
    return PlanCache<ConvLayerPlan>::Built{std::make_shared<ConvLayerPlan>(*std::move(plan)),
                                           bytes};
  });
}

absl::StatusOr<FusedPairs> DevicePool::FusePairs(
    Device& device, Worker& worker, const Graph& graph,
    const std::vector<ConvLayerProblem>& problems,
    const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
    const std::vector<size_t>& segment_ends, const std::vector<void*>& unfused_places,
    const DeviceWeights& weights, const std::function<absl::Status()>& settle) {
  FusedPairs fused(problems.size());
  if (!options_.fuse_pointwise_pairs || problems.size() < 2) return fused;
  ASSIGN_OR_RETURN(const int64_t shared_limit, PointwisePairSharedLimit());
  for (size_t i = 0; i + 1 < problems.size(); ++i) {
    const bool straddles =
        std::find(segment_ends.begin(), segment_ends.end(), i + 1) != segment_ends.end();
    if (straddles || !PointwisePairRejection(problems[i], problems[i + 1], shared_limit).empty()) {
      continue;
    }
    ASSIGN_OR_RETURN(std::shared_ptr<PointwisePairChoice> choice,
                     PairChoiceFor(device, worker, graph, i, problems, plans, unfused_places,
                                   weights, settle));
    if (choice->fused) {
      fused[i] = std::move(choice);
      ++i;  // layer i + 1 is taken
    }
  }
  return fused;
}

absl::StatusOr<std::shared_ptr<PointwisePairChoice>> DevicePool::PairChoiceFor(
    Device& device, Worker& worker, const Graph& graph, size_t layer,
    const std::vector<ConvLayerProblem>& problems,
    const std::vector<std::shared_ptr<ConvLayerPlan>>& plans,
    const std::vector<void*>& unfused_places, const DeviceWeights& weights,
    const std::function<absl::Status()>& settle) {
  const ConvLayerProblem& first = problems[layer];
  const ConvLayerProblem& second = problems[layer + 1];
  // Shared by every graph and worker on GPUs of this model, like the
  // layers' engine choices it is raced against.
  const PlanKey key =
      ModelKey(absl::StrCat("pointwise_pair:", first.Encode(), "+", second.Encode()), first,
               absl::StrCat(policy_, "/", device.target.Key()));
  return pair_choices_.GetOrBuild(
      key, [&]() -> absl::StatusOr<PlanCache<PointwisePairChoice>::Built> {
        auto choice = std::make_shared<PointwisePairChoice>();
        const PlanCache<PointwisePairChoice>::Built built{choice, sizeof(PointwisePairChoice)};
        const std::string quarantine_key =
            PairQuarantineKey(device.target.Key(), first, second);
        if (std::optional<std::string> why = store_->Get("quarantine", quarantine_key)) {
          spdlog::warn("pointwise pair for graph '{}' layers[{}] and [{}] on GPU {} is "
                       "quarantined ({}); they run as two layers",
                       graph.name(), layer, layer + 1, device.ordinal, *why);
          return built;
        }
        ++pair_races_;
        cudaStream_t stream = worker.stream.get();
        void* const workspace = worker.workspace.data();
        const ConvLayerBuffers a = LayerBuffers(unfused_places, weights, workspace, layer);
        const ConvLayerBuffers b = LayerBuffers(unfused_places, weights, workspace, layer + 1);
        // The kernel writes the buffer of ping and pong that it does not
        // read (unfused, layer + 1's output may be this pair's input; the
        // race's outputs are dropped).
        PointwisePairBuffers pair = PairBuffers(unfused_places, weights, layer);
        pair.y = a.x == worker.ping.data() ? worker.pong.data() : worker.ping.data();
        // Each sample waits for its runs, so a fault surfaces in the sample
        // of whichever side caused it.
        bool kernel_running = false;
        const auto race = [&]() -> absl::Status {
          ASSIGN_OR_RETURN(const std::vector<PointwisePairGrid> grids,
                           PointwisePairGrids(first, second));
          RETURN_IF_ERROR(settle());
          if (!plans[layer]->IsBoundTo(a)) RETURN_IF_ERROR(plans[layer]->Bind(first, a));
          if (!plans[layer + 1]->IsBoundTo(b)) RETURN_IF_ERROR(plans[layer + 1]->Bind(second, b));
          cudnnHandle_t handle = worker.handle.get();
          ASSIGN_OR_RETURN(LaunchTimer layers, LaunchTimer::Create(stream, [&]() -> absl::Status {
                             RETURN_IF_ERROR(plans[layer]->RunBound(handle, stream, first));
                             return plans[layer + 1]->RunBound(handle, stream, second);
                           }));
          kernel_running = true;
          std::vector<LaunchTimer> kernels;
          for (const PointwisePairGrid& grid : grids) {
            ASSIGN_OR_RETURN(LaunchTimer kernel, LaunchTimer::Create(stream, [&, grid] {
                               return LaunchPointwisePair(first, second, pair, grid, stream);
                             }));
            kernels.push_back(std::move(kernel));
          }
          // In turns, so drift in clocks falls on all alike.
          std::vector<float> layers_ms;
          std::vector<std::vector<float>> kernel_ms(kernels.size());
          for (int round = 0; round < kPairRaceRounds; ++round) {
            kernel_running = false;
            ASSIGN_OR_RETURN(float ms, layers.Sample());
            layers_ms.push_back(ms);
            kernel_running = true;
            if (options_.testing_fault_in_pair_race && round == 0) {
              RETURN_IF_ERROR(LaunchMisalignedWriteForTesting(pair.y, stream));
              CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
            }
            for (size_t k = 0; k < kernels.size(); ++k) {
              ASSIGN_OR_RETURN(ms, kernels[k].Sample());
              kernel_ms[k].push_back(ms);
            }
          }
          choice->layers_ms = MedianSample(std::move(layers_ms));
          for (size_t k = 0; k < kernels.size(); ++k) {
            const float ms = MedianSample(std::move(kernel_ms[k]));
            if (k == 0 || ms < choice->fused_ms) {
              choice->fused_ms = ms;
              choice->grid = grids[k];
            }
          }
          return absl::OkStatus();
        };
        const absl::Status raced = race();
        const cudaError_t lost = StickyCudaError(raced, stream);
        if (lost != cudaSuccess) {
          // This process lost its GPU in the race. When the kernel ran, the
          // restarted server must not race it again; the request's fault
          // handling quarantines the layers' engines (RunTask).
          if (kernel_running) {
            absl::Status blamed = raced;
            blamed.SetPayload(kPairKernelFaulted, absl::Cord("1"));
            ++in_process_quarantined_;
            store_->Put("quarantine", quarantine_key,
                        absl::StrCat("faulted in its race: ", raced.message()))
                .IgnoreError();
            spdlog::error("pointwise pair for graph '{}' layers[{}] and [{}] quarantined on GPU "
                          "{}: {}",
                          graph.name(), layer, layer + 1, device.ordinal,
                          std::string(raced.message()));
            return blamed;
          }
          return raced;
        }
        if (!raced.ok()) {
          cudaGetLastError();  // not sticky: cleared for this thread
          spdlog::warn("pointwise pair for graph '{}' layers[{}] and [{}] on GPU {} not raced "
                       "({}); they run as two layers",
                       graph.name(), layer, layer + 1, device.ordinal,
                       std::string(raced.message()));
          choice->fused_ms = choice->layers_ms = 0;
          return built;
        }
        choice->fused =
            options_.testing_always_fuse_pairs || choice->fused_ms < choice->layers_ms;
        if (choice->fused) ++pairs_fused_;
        spdlog::info("pointwise pair: graph '{}' layers[{}] and [{}] ({} then {}) on GPU {}: "
                     "one kernel {:.4f} ms ({} blocks, {} output slice(s)), two layers {:.4f} "
                     "ms: {}",
                     graph.name(), layer, layer + 1, first.Describe(), second.Describe(),
                     device.ordinal, choice->fused_ms, choice->grid.blocks, choice->grid.slices,
                     choice->layers_ms, choice->fused ? "fused" : "not fused");
        return built;
      });
}

namespace {

// CUDA memory on the GPU of `ordinal` (a kernel there can address it).
bool OnDevice(const std::optional<TensorMemory>& memory, int ordinal) {
  return memory.has_value() && memory->kind == TensorMemory::Kind::kDevice &&
         memory->device == ordinal;
}

// Device memory a plan may read or write in place: on the worker's GPU and
// aligned as every tensor is declared to cuDNN (16 bytes).
bool InPlace(const std::optional<TensorMemory>& memory, int ordinal) {
  return OnDevice(memory, ordinal) && reinterpret_cast<uintptr_t>(memory->data) % 16 == 0;
}

}  // namespace

namespace {

bool Cancelled(const InferCall& call) { return call.cancelled && call.cancelled(); }

// Host memory the GPU copies to or from directly (a page-locked region or
// buffer), or device memory: no staging copy.
bool Direct(const std::optional<TensorMemory>& memory) {
  return memory && (memory->kind == TensorMemory::Kind::kDevice || memory->pinned);
}

// One call's copy in a batch could not be queued: a sticky error ends the
// execution (the GPU is lost); any other fails only that call, whose slice
// of the batch is then computed and dropped.
absl::Status CheckCallCopy(cudaError_t error, const char* what, absl::Status* call_status) {
  if (error == cudaSuccess) return absl::OkStatus();
  if (IsStickyCudaError(error)) return CudaError(error, what, __FILE__, __LINE__);
  cudaGetLastError();  // not sticky: cleared for this thread
  *call_status = absl::InternalError(absl::StrCat("copying this request's ", what, " failed: ",
                                                  cudaGetErrorName(error), " (",
                                                  cudaGetErrorString(error), ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status DevicePool::Launch(Device& device, Worker& worker, Task& task, bool behind,
                                Execution* execution) {
  absl::Time start = absl::Now();
  std::vector<absl::Status>* const results = &execution->results;
  InferTimings* const timings = &execution->timings;
  results->assign(task.calls.size(), absl::OkStatus());
  timings->device = absl::StrCat(device.ordinal);
  timings->queue = Seconds(start - task.accepted);
  cudaStream_t stream = worker.stream.get();
  // Behind another execution still on the stream, buffers it may use are
  // reallocated, captured graphs it may replay are updated, and pinned
  // staging is written only once it has ended.
  bool settled = !behind;
  const auto settle = [&]() -> absl::Status {
    if (settled) return absl::OkStatus();
    settled = true;
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  };
  // Calls cancelled while they waited are answered, not run.
  std::vector<size_t>& live = execution->live;
  live.clear();
  for (size_t i = 0; i < task.calls.size(); ++i) {
    if (Cancelled(task.calls[i])) {
      (*results)[i] = absl::CancelledError(
          "the client cancelled or the deadline passed before the request ran");
    } else {
      live.push_back(i);
    }
  }
  if (live.empty()) return absl::OkStatus();
  // A batch stops early only when none of its calls wants the result.
  const auto cancelled = [&] {
    for (size_t i : live) {
      if (!Cancelled(task.calls[i])) return false;
    }
    return true;
  };
  const InferCall& first = task.calls[live.front()];
  const Graph& graph = *first.graph;
  // Set before anything is queued: a request of this graph that fails on a
  // context the hook already lost must not quarantine the graph's engines.
  task.fault_hook =
      !options_.testing_fault_graph.empty() && graph.name() == options_.testing_fault_graph;
  // The execution's shapes: N is the sum of the calls' (N is outermost in
  // every layout, so each call's tensors are contiguous slices).
  task.input_shape = first.input_shape;
  std::vector<Shape> outputs = first.layer_outputs;
  if (live.size() > 1) {
    int64_t n = 0;
    for (size_t i : live) n += task.calls[i].input_shape[0];
    task.input_shape[0] = n;
    for (Shape& shape : outputs) shape[0] = n;
  }
  const Shape& input_shape = task.input_shape;
  Worker::LastPlans& memo = worker.last_plans;
  // Read before any lookup: a value let go meanwhile makes the next
  // execution look up again.
  const uint64_t generation = plans_.generation();
  const bool same_as_last = memo.problems != nullptr && memo.generation == generation &&
                            memo.graph_id == graph.id() && memo.input_shape == input_shape;
  task.problems = same_as_last ? memo.problems
                               : std::make_shared<const std::vector<ConvLayerProblem>>(
                                     MakeLayerProblems(graph, input_shape, outputs));
  const std::vector<ConvLayerProblem>& problems = *task.problems;
  const size_t element = DTypeSize(graph.spec().dtype);
  int64_t largest = 0;
  for (const Shape& shape : outputs) largest = std::max(largest, NumElements(shape));
  const size_t in_bytes = NumElements(input_shape) * element;
  const size_t out_bytes = NumElements(outputs.back()) * element;
  // Each call's slice of the execution's input and output.
  std::vector<size_t> in_offset(task.calls.size()), call_in_bytes(task.calls.size());
  std::vector<size_t>& out_offset = execution->out_offset;
  std::vector<size_t>& call_out_bytes = execution->call_out_bytes;
  out_offset.assign(task.calls.size(), 0);
  call_out_bytes.assign(task.calls.size(), 0);
  {
    size_t in = 0, out = 0;
    for (size_t i : live) {
      in_offset[i] = in;
      out_offset[i] = out;
      call_in_bytes[i] = NumElements(task.calls[i].input_shape) * element;
      call_out_bytes[i] = NumElements(task.calls[i].layer_outputs.back()) * element;
      in += call_in_bytes[i];
      out += call_out_bytes[i];
    }
  }
  // Where inputs come from and outputs go (docs/runtime.md, "Host copies"):
  // a CUDA region on this GPU is read and written in place when the call
  // runs alone (a batch needs its slices side by side in one buffer: the
  // regions of a batch's calls on this GPU are gathered into it, and their
  // outputs scattered back, by one kernel launch each way); a pinned
  // (registered) host region, or a CUDA region elsewhere, is copied to and
  // from directly; other host memory goes through this worker's pinned
  // staging buffers.
  const bool alone = live.size() == 1;
  const bool input_in_place = alone && InPlace(first.input_memory, device.ordinal);
  const bool output_in_place = alone && InPlace(first.output_memory, device.ordinal);
  execution->input_in_place = input_in_place;
  execution->output_in_place = output_in_place;
  bool staged_in = false, staged_out = false;
  for (size_t i : live) {
    staged_in = staged_in || !Direct(task.calls[i].input_memory);
    staged_out = staged_out || !Direct(task.calls[i].output_memory);
  }
  if (staged_in || staged_out) RETURN_IF_ERROR(settle());
  // Captured graphs hold the addresses of these buffers.
  bool moved = false;
  if (staged_in) RETURN_IF_ERROR(Grow(&worker.staging_in, in_bytes));
  if (staged_out) RETURN_IF_ERROR(Grow(&worker.staging_out, out_bytes));
  const DeviceWeights& weights = *task.resources->weights[device.slot];

  std::vector<std::shared_ptr<ConvLayerPlan>>& plans = task.plans;
  FusedPairs& fused = task.fused;
  if (same_as_last) {
    plans = memo.plans;
    fused = memo.fused;
  } else {
    memo.problems = nullptr;  // until this lookup succeeds
    for (size_t i = 0; i < problems.size(); ++i) {
      ASSIGN_OR_RETURN(std::shared_ptr<ConvLayerPlan> plan,
                       LayerPlan(device, worker, graph, i, problems[i]));
      plans.push_back(std::move(plan));
    }
  }
  int64_t workspace = 0;
  for (const auto& plan : plans) workspace = std::max(workspace, plan->workspace_bytes());
  const auto needs = LayerBufferNeeds(worker, in_bytes, largest * element, problems.size(),
                                      workspace, input_in_place);
  if (!LayerBuffersFit(needs)) {
    RETURN_IF_ERROR(settle());
    RETURN_IF_ERROR(GrowLayerBuffers(needs, &moved));
  }
  if (moved) worker.graphs->Clear();
  if (cancelled()) {
    return absl::CancelledError(
        "the client cancelled or the deadline passed while the request's plans were built");
  }

  const void* first_input = input_in_place ? first.input_memory->data : worker.input.data();
  void* const last_output = output_in_place ? first.output_memory->data : nullptr;
  // Layers are queued ahead of the GPU, but never much more than
  // kMaxQueuedAheadMs of work: then the worker waits for it and checks for
  // cancellation, so a cancelled request stops at a layer boundary. CUDA
  // graphs are captured per segment, so replays stop at the same points.
  const std::vector<size_t> segment_ends = SegmentEnds(problems, plans);
  execution->one_segment = segment_ends.size() == 1;
  if (!same_as_last) {
    const std::vector<void*> unfused = TensorPlaces(worker, problems.size(), first_input,
                                                    last_output, FusedPairs(problems.size()));
    absl::StatusOr<FusedPairs> found =
        FusePairs(device, worker, graph, problems, plans, segment_ends, unfused, weights, settle);
    if (!found.ok()) {
      task.pair_faulted = found.status().GetPayload(kPairKernelFaulted).has_value();
      return found.status();
    }
    fused = *std::move(found);
    memo.graph_id = graph.id();
    memo.input_shape = input_shape;
    memo.generation = generation;
    memo.problems = task.problems;
    memo.plans = plans;
    memo.fused = fused;
  }
  const std::vector<void*> places =
      TensorPlaces(worker, problems.size(), first_input, last_output, fused);
  RETURN_IF_ERROR(BindLayers(problems, plans, fused, places, weights, worker.workspace.data()));
  const auto launch_layers = [&](size_t begin, size_t end) -> absl::Status {
    return RunLayers(worker.handle.get(), stream, problems, plans, fused, places, weights, begin,
                     end);
  };

  // The captured graph to replay, if any. Captured before the timed
  // section: capture only records launches, the GPU runs nothing. Held
  // until the execution ends (the cache may drop it meanwhile).
  std::shared_ptr<CapturedLayers>& captured = execution->captured;
  CudaGraphKey graph_key;
  if (options_.cuda_graphs) {
    graph_key.graph_id = graph.id();
    graph_key.input_shape = input_shape;
    graph_key.input = first_input;
    graph_key.output = places.back();
    CudaGraphCache<CapturedLayers>::Dependencies dependencies = {task.resources};
    for (const auto& plan : plans) dependencies.push_back(plan);
    for (const auto& pair : fused) {
      if (pair != nullptr) dependencies.push_back(pair);
    }
    captured = worker.graphs->Find(graph_key, dependencies);
    timings->replayed = captured != nullptr;
    if (captured == nullptr && worker.graphs->ShouldCapture(graph_key)) {
      RETURN_IF_ERROR(settle());  // the variant it may update could still be running
      ASSIGN_OR_RETURN(CapturedLayers::Result capture,
                       CapturedLayers::Capture(stream, segment_ends, launch_layers,
                                               worker.graphs->TakeVariant(graph_key)));
      if (capture.captured != nullptr) {
        captured = capture.captured;
        worker.graphs->Insert(graph_key, dependencies, std::move(capture.captured),
                              capture.updated);
      } else {
        worker.graphs->MarkUncapturable(graph_key);
        spdlog::warn("CUDA graph capture failed on GPU {} worker {} for graph '{}' input {} "
                     "({}): {}; this graph and shape run as plain launches on this worker",
                     device.ordinal, worker.index, graph.name(), ShapeToString(input_shape),
                     task.Engines(), capture.failure);
      }
    }
  }
  timings->build = Seconds(absl::Now() - start);

  start = absl::Now();
  uint8_t* const staging_in = static_cast<uint8_t*>(worker.staging_in.data());
  for (size_t i : live) {
    const InferCall& call = task.calls[i];
    if (!Direct(call.input_memory)) {
      // Host copy: the request's bytes into pinned staging, so the copy to
      // the GPU is a true async DMA. A client's region that was not page-
      // locked is read by a guarded copy (it may have been truncated): a
      // failure fails that call alone.
      if (call.input_memory && call.input_memory->shared_region) {
        (*results)[i] = CopyGuarded(staging_in + in_offset[i], call.input.data(), call_in_bytes[i]);
      } else {
        std::memcpy(staging_in + in_offset[i], call.input.data(), call_in_bytes[i]);
      }
    }
  }
  execution->stage_in = Seconds(absl::Now() - start);
  // The copies are timed only where there are any: an input or output used
  // in place saves two event calls each way.
  CudaEvent* const events = worker.events[execution->events];
  if (!input_in_place) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(events[0].get(), stream));
    uint8_t* const input = static_cast<uint8_t*>(worker.input.data());
    std::vector<SliceCopy> gathered;  // inputs in CUDA memory on this GPU
    for (size_t i : live) {
      const InferCall& call = task.calls[i];
      const std::optional<TensorMemory>& memory = call.input_memory;
      cudaError_t copied = cudaSuccess;
      if (OnDevice(memory, device.ordinal)) {
        gathered.push_back({memory->data, input + in_offset[i], call_in_bytes[i]});
      } else if (memory && memory->kind == TensorMemory::Kind::kDevice) {
        copied = cudaMemcpyPeerAsync(input + in_offset[i], device.ordinal, memory->data,
                                     memory->device, call_in_bytes[i], stream);
      } else {
        const void* source = Direct(memory) ? memory->data : staging_in + in_offset[i];
        copied = cudaMemcpyAsync(input + in_offset[i], source, call_in_bytes[i],
                                 cudaMemcpyHostToDevice, stream);
      }
      RETURN_IF_ERROR(CheckCallCopy(copied, "input", &(*results)[i]));
    }
    RETURN_IF_ERROR(LaunchSliceCopies(gathered, stream));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(events[1].get(), stream));
  if (task.fault_hook) {
    RETURN_IF_ERROR(LaunchMisalignedWriteForTesting(worker.ping.data(), stream));
  }
  size_t begin = 0;
  for (size_t s = 0; s < segment_ends.size(); ++s) {
    const size_t end = segment_ends[s];
    if (begin > 0 && cancelled()) {
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // the staging buffers are reused
      return LayersCancelledError(graph, begin, problems.size());
    }
    if (captured != nullptr) {
      const cudaError_t launched = captured->Launch(s, stream);
      if (IsStickyCudaError(launched)) {
        return CudaError(launched, "cudaGraphLaunch(captured layers)", __FILE__, __LINE__);
      }
      if (launched != cudaSuccess) {
        cudaGetLastError();  // not sticky: cleared, and the rest runs plain
        worker.graphs->MarkUncapturable(graph_key);
        spdlog::warn("CUDA graph launch failed on GPU {} worker {} for graph '{}' input {} "
                     "({}): {} ({}); this graph and shape run as plain launches on this worker",
                     device.ordinal, worker.index, graph.name(), ShapeToString(input_shape),
                     task.Engines(), cudaGetErrorName(launched), cudaGetErrorString(launched));
        captured = nullptr;
        timings->replayed = false;
      }
    }
    if (captured == nullptr) {
      for (size_t i = begin; i < end; ++i) {
        if (i > begin && cancelled()) {
          CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
          return LayersCancelledError(graph, i, problems.size());
        }
        RETURN_IF_ERROR(launch_layers(i, i + 1));
      }
    }
    if (end < problems.size()) {
      CUDA_RETURN_IF_ERROR(cudaEventRecord(worker.layer_done.get(), stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(worker.layer_done.get()));
    }
    begin = end;
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2].get(), stream));
  const uint8_t* const result = static_cast<const uint8_t*>(places.back());
  uint8_t* const staging_out = static_cast<uint8_t*>(worker.staging_out.data());
  if (!output_in_place) {
    std::vector<SliceCopy> scattered;  // outputs to CUDA memory on this GPU
    for (size_t i : live) {
      if (!(*results)[i].ok()) continue;  // its input never arrived
      const std::optional<TensorMemory>& memory = task.calls[i].output_memory;
      cudaError_t copied = cudaSuccess;
      if (OnDevice(memory, device.ordinal)) {
        scattered.push_back({result + out_offset[i], memory->data, call_out_bytes[i]});
      } else if (memory && memory->kind == TensorMemory::Kind::kDevice) {
        copied = cudaMemcpyPeerAsync(memory->data, memory->device, result + out_offset[i],
                                     device.ordinal, call_out_bytes[i], stream);
      } else {
        void* target = Direct(memory) ? static_cast<void*>(memory->data)
                                      : staging_out + out_offset[i];
        copied = cudaMemcpyAsync(target, result + out_offset[i], call_out_bytes[i],
                                 cudaMemcpyDeviceToHost, stream);
      }
      RETURN_IF_ERROR(CheckCallCopy(copied, "output", &(*results)[i]));
    }
    RETURN_IF_ERROR(LaunchSliceCopies(scattered, stream));
  }
  if (!output_in_place) CUDA_RETURN_IF_ERROR(cudaEventRecord(events[3].get(), stream));
  return absl::OkStatus();
}

absl::Status DevicePool::Finish(Worker& worker, Task& task, Execution& execution) {
  const std::vector<size_t>& live = execution.live;
  if (live.empty()) return absl::OkStatus();  // every call was cancelled before it ran
  std::vector<absl::Status>* const results = &execution.results;
  const std::vector<size_t>& out_offset = execution.out_offset;
  const std::vector<size_t>& call_out_bytes = execution.call_out_bytes;
  CudaEvent* const events = worker.events[execution.events];
  // The execution's last event, not the stream: one launched behind it may
  // still run.
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events[execution.output_in_place ? 2 : 3].get()));
  execution.captured = nullptr;
  const uint8_t* const staging_out = static_cast<const uint8_t*>(worker.staging_out.data());
  const absl::Time start = absl::Now();
  for (size_t i : live) {
    InferCall& call = task.calls[i];
    if (!(*results)[i].ok() || Direct(call.output_memory)) continue;
    // Host copy: pinned staging into the response message or the region.
    if (call.output_memory) {
      (*results)[i] = CopyGuarded(call.output_memory->data, staging_out + out_offset[i],
                                  call_out_bytes[i]);
    } else {
      call.output->resize(call_out_bytes[i]);
      std::memcpy(call.output->data(), staging_out + out_offset[i], call_out_bytes[i]);
    }
  }
  const double stage_out = Seconds(absl::Now() - start);
  double h2d = 0, d2h = 0;
  if (!execution.input_in_place) {
    ASSIGN_OR_RETURN(h2d, ElapsedSeconds(events[0], events[1]));
  }
  ASSIGN_OR_RETURN(double compute, ElapsedSeconds(events[1], events[2]));
  if (!execution.output_in_place) {
    ASSIGN_OR_RETURN(d2h, ElapsedSeconds(events[2], events[3]));
  }
  InferTimings& timings = execution.timings;
  timings.h2d = execution.stage_in + h2d;
  timings.compute = compute;
  timings.d2h = d2h + stage_out;
  return absl::OkStatus();
}

std::unique_ptr<DevicePool::Task> DevicePool::TakeFollower(Device& device, Worker& worker,
                                                           const Task& leader) {
  if (leader.calls.size() != 1) return nullptr;  // a failed batch is retried call by call
  const InferCall& led = leader.calls.front();
  // The leader's plans are still current: the follower's launch builds
  // nothing while the leader's answer waits.
  const Worker::LastPlans& memo = worker.last_plans;
  if (memo.problems == nullptr || memo.generation != plans_.generation()) return nullptr;
  absl::MutexLock lock(&device.mu);
  if (!worker.warm_jobs.empty() || device.queue.empty() || device.lost.load()) return nullptr;
  const Task& next = *device.queue.front();
  if (next.calls.size() != 1) return nullptr;
  const InferCall& call = next.calls.front();
  if (call.graph->id() != led.graph->id() || call.input_shape != leader.input_shape ||
      !Direct(call.input_memory) || !Direct(call.output_memory)) {
    return nullptr;
  }
  return PopQueuedLocked(device);
}

std::unique_ptr<DevicePool::Task> DevicePool::PopQueuedLocked(Device& device) {
  std::unique_ptr<Task> task = std::move(device.queue.front());
  device.queue.pop_front();
  device.queued.store(device.queue.size(), std::memory_order_release);
  ++device.running;
  return task;
}

absl::StatusOr<std::shared_ptr<const void>> DevicePool::PinHostMemory(void* data, size_t bytes) {
  // Portable: page-locked for every GPU's context, not only the current one.
  CUDA_RETURN_IF_ERROR(cudaHostRegister(data, bytes, cudaHostRegisterPortable));
  return std::shared_ptr<const void>(data, [](const void* pinned) {
    cudaHostUnregister(const_cast<void*>(pinned));
  });
}

absl::StatusOr<RequestRunner::DeviceMapping> DevicePool::OpenCudaIpc(const std::string& handle,
                                                                    int device, size_t bytes) {
  const auto served = std::find_if(devices_.begin(), devices_.end(),
                                    [&](const auto& d) { return d->ordinal == device; });
  if (served == devices_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " is not one this server serves on (--gpus); register memory "
        "of a GPU the server uses"));
  }
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("raw_handle holds ", handle.size(),
                                                   " bytes; a cudaIpcMemHandle_t has ",
                                                   sizeof(cudaIpcMemHandle_t)));
  }
  cudaIpcMemHandle_t ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* mapped = nullptr;
  const cudaError_t opened = cudaIpcOpenMemHandle(&mapped, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for this thread
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA IPC handle does not open on device ", device, ": ", cudaGetErrorName(opened),
        " (", cudaGetErrorString(opened), "); it must come from cudaIpcGetMemHandle in another "
        "process on this machine"));
  }
  DeviceMapping mapping;
  mapping.data = static_cast<uint8_t*>(mapped);
  mapping.token = std::shared_ptr<const void>(mapped, [device](const void* pointer) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device);
    cudaIpcCloseMemHandle(const_cast<void*>(pointer));
    cudaSetDevice(current);
  });
  return mapping;
}

}  // namespace convserve
