// The cuDNN backend: each layer runs a fused conv-bias-activation execution
// plan, or a conv plan plus our bias+activation kernel where cuDNN has no
// fused engine. Intermediates stay on the device.
//
// Thread-safety: all methods may be called from any thread. This backend
// owns one cuDNN handle and stream on one GPU and serializes work on them;
// the multi-GPU worker pool and the shared plan cache come with the runtime.
#ifndef CONVSERVE_ENGINE_CUDNN_CUDNN_BACKEND_H_
#define CONVSERVE_ENGINE_CUDNN_CUDNN_BACKEND_H_

#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/device_weights.h"
#include "engine/cudnn/engine_selection.h"

namespace convserve {

struct CudnnBackendOptions {
  // CUDA device ordinal.
  int device = 0;
  // Engine search and filters.
  EngineSelection selection;
  // Compiled (graph, shape) executables kept for reuse.
  int max_cached_executables = 256;
  // Test each cuDNN plan for programmatic entry (AdmitProgrammaticEntry) as
  // it is compiled, and let autotune time the plans it keeps so
  // (SearchOptions::programmatic_entry). Only a caller that captures the
  // executable's plans into CUDA graphs gains from it (conv_layer_bench);
  // Run never captures.
  bool programmatic_entry = false;
};

// Versions seen at start-up, for logs and metrics.
struct CudnnVersions {
  int compiled_cudnn = 0;
  int runtime_cudnn = 0;
  int compiled_cuda = 0;
  int runtime_cuda = 0;
  int driver_cuda = 0;
  std::string device_name;
  int compute_capability = 0;  // e.g. 90
  std::string ToString() const;
  // What the errata and the plan store key on.
  CudnnTarget target() const;
};

// "9.14.0" for cuDNN (major*10000 + minor*100 + patch) or "13.0" for CUDA
// (major*1000 + minor*10).
std::string VersionString(int version, bool cudnn);

// Number of CUDA devices usable here; 0 when there is no driver or GPU.
int CudaDeviceCount();

// Versions and device properties of `device`. FAILED_PRECONDITION when the
// device does not exist or the loaded cuDNN is older than 9.0.
absl::StatusOr<CudnnVersions> CheckCudnnRuntime(int device);

class CudnnExecutable;

class CudnnBackend : public Backend {
 public:
  // FAILED_PRECONDITION when there is no GPU, the runtime cuDNN is older than
  // 9.0, or the device cannot be used.
  static absl::StatusOr<std::unique_ptr<CudnnBackend>> Create(const CudnnBackendOptions& options);
  ~CudnnBackend() override;

  std::string name() const override { return "cudnn"; }
  std::string Describe() const override;
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::shared_ptr<const Graph> graph,
                                                      const Shape& input_shape) override;

  const CudnnVersions& versions() const { return versions_; }

 private:
  friend class CudnnExecutable;

  CudnnBackend(const CudnnBackendOptions& options, CudnnVersions versions)
      : options_(options), versions_(std::move(versions)) {}

  absl::StatusOr<std::shared_ptr<CudnnExecutable>> CompileLocked(
      std::shared_ptr<const Graph> graph, const Shape& input_shape)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<DeviceWeights>> WeightsLocked(const Graph& graph)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CudnnBackendOptions options_;
  const CudnnVersions versions_;
  // One lock for the handle and stream: cuDNN handles must not be shared by
  // threads at once. The runtime's worker pool replaces this with per-thread
  // handles.
  absl::Mutex mu_;
  CudaStream stream_ ABSL_GUARDED_BY(mu_);
  CudnnHandle handle_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::weak_ptr<DeviceWeights>> weights_ ABSL_GUARDED_BY(mu_);
  // Most recently used first.
  std::list<std::pair<std::string, std::shared_ptr<CudnnExecutable>>> lru_ ABSL_GUARDED_BY(mu_);
};

// One graph compiled for one input shape: per-layer plans, device buffers.
class CudnnExecutable : public Executable {
 public:
  const Shape& input_shape() const override { return input_shape_; }
  const Shape& output_shape() const override { return problems_.back().output; }
  using Executable::Run;
  // Checks `cancelled` before queueing each layer after the first. Queueing
  // is asynchronous, so this stops a request that was abandoned before its
  // launches; layers already queued still run on the device.
  absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                   const CancelCheck& cancelled) override;

  // Device time of the whole graph with inputs already on the device (no
  // copies), for benchmarks: `warmup` untimed runs, then `samples` times
  // `runs_per_sample` back-to-back runs between two CUDA events; returns the
  // mean milliseconds per run of each sample.
  absl::StatusOr<std::vector<float>> TimeDeviceRuns(int warmup, int samples, int runs_per_sample);

  // Per layer: which path it runs and the engine chosen.
  const std::vector<ConvLayerPlan>& plans() const { return plans_; }
  const std::vector<ConvLayerProblem>& problems() const { return problems_; }
  const std::string& graph_id() const { return graph_->id(); }

 private:
  friend class CudnnBackend;
  CudnnExecutable() = default;

  // Layer i reads the input or the previous layer's output and writes
  // ping/pong alternately.
  ConvLayerBuffers BuffersFor(size_t layer) const;
  // Queues every layer on the backend's stream, input_ -> last layer output;
  // CANCELLED, with the earlier layers queued, when `cancelled` turns true
  // before a later layer's launch.
  absl::Status EnqueueLayers(cudnnHandle_t handle, cudaStream_t stream,
                             const CancelCheck& cancelled, const void** output) const;

  CudnnBackend* backend_ = nullptr;  // the backend owns (caches) its executables
  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<DeviceWeights> weights_;
  Shape input_shape_;
  std::vector<ConvLayerProblem> problems_;
  std::vector<ConvLayerPlan> plans_;
  DeviceBuffer input_;
  DeviceBuffer ping_, pong_;  // layer outputs alternate between these
  DeviceBuffer workspace_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CUDNN_BACKEND_H_
