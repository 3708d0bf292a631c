#include "engine/cudnn/cudnn_backend.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/cudnn/candidate_search.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"
#include "spdlog/spdlog.h"

namespace convserve {

std::string VersionString(int version, bool cudnn) {
  // cuDNN 9: major*10000 + minor*100 + patch; CUDA: major*1000 + minor*10.
  if (cudnn) {
    return absl::StrCat(version / 10000, ".", (version % 10000) / 100, ".", version % 100);
  }
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

namespace {

std::string ShapeKey(const std::string& graph_id, const Shape& shape) {
  return absl::StrCat(graph_id, "/", absl::StrJoin(shape, "x"));
}

}  // namespace

CudnnTarget CudnnVersions::target() const {
  CudnnTarget target;
  target.cudnn_version = runtime_cudnn;
  target.compute_capability = compute_capability;
  target.device_name = device_name;
  return target;
}

std::string CudnnVersions::ToString() const {
  return absl::StrCat("GPU ", device_name, " (sm_", compute_capability, "), cuDNN runtime ",
                      VersionString(runtime_cudnn, true), " (compiled against ",
                      VersionString(compiled_cudnn, true), "), CUDA runtime ",
                      VersionString(runtime_cuda, false), " (compiled against ",
                      VersionString(compiled_cuda, false), "), driver supports CUDA ",
                      VersionString(driver_cuda, false));
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

absl::StatusOr<CudnnVersions> CheckCudnnRuntime(int device) {
  const int devices = CudaDeviceCount();
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device is visible");
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " does not exist; ", devices, " visible"));
  }
  CudnnVersions versions;
  versions.compiled_cudnn = CUDNN_VERSION;
  versions.runtime_cudnn = static_cast<int>(cudnnGetVersion());
  versions.compiled_cuda = CUDART_VERSION;
  CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&versions.runtime_cuda));
  CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&versions.driver_cuda));
  // The backend API as used here (and the engines behind it) needs cuDNN 9;
  // the headers may be newer than the library, never the other way round.
  if (versions.runtime_cudnn < 90000) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN ", VersionString(versions.runtime_cudnn, true),
                     " is loaded; convserve needs cuDNN 9.0 or newer"));
  }
  cudaDeviceProp properties;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
  versions.device_name = properties.name;
  versions.compute_capability = properties.major * 10 + properties.minor;
  return versions;
}

absl::StatusOr<std::unique_ptr<CudnnBackend>> CudnnBackend::Create(
    const CudnnBackendOptions& options) {
  ASSIGN_OR_RETURN(CudnnVersions versions, CheckCudnnRuntime(options.device));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));

  CudnnBackendOptions resolved = options;
  if (resolved.selection.errata == nullptr) {
    ASSIGN_OR_RETURN(resolved.selection.errata, CudnnErrata::Create(""));
  }
  std::unique_ptr<CudnnBackend> backend(new CudnnBackend(resolved, std::move(versions)));
  absl::MutexLock lock(&backend->mu_);
  ASSIGN_OR_RETURN(backend->stream_, CudaStream::Create());
  ASSIGN_OR_RETURN(backend->handle_, CudnnHandle::Create(backend->stream_.get()));
  return backend;
}

CudnnBackend::~CudnnBackend() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(options_.device);
  lru_.clear();
}

std::string CudnnBackend::Describe() const {
  return absl::StrCat("cudnn backend on device ", options_.device, ": ", versions_.ToString(),
                      "; engine selection ", EngineSearchName(options_.selection.search),
                      options_.selection.deterministic_only ? ", deterministic only" : "",
                      options_.selection.strict_float32 ? ", strict float32" : ", TF32 allowed");
}

absl::StatusOr<std::shared_ptr<Executable>> CudnnBackend::Compile(
    std::shared_ptr<const Graph> graph, const Shape& input_shape) {
  absl::MutexLock lock(&mu_);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  ASSIGN_OR_RETURN(std::shared_ptr<CudnnExecutable> executable,
                   CompileLocked(std::move(graph), input_shape));
  return std::shared_ptr<Executable>(std::move(executable));
}

absl::StatusOr<std::shared_ptr<DeviceWeights>> CudnnBackend::WeightsLocked(
    const Graph& graph) {
  auto it = weights_.find(graph.id());
  if (it != weights_.end()) {
    if (std::shared_ptr<DeviceWeights> live = it->second.lock()) return live;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceWeights> weights,
                   DeviceWeights::Upload(graph, options_.device,
                                         !options_.selection.strict_float32));
  weights_[graph.id()] = weights;
  return weights;
}

absl::StatusOr<std::shared_ptr<CudnnExecutable>> CudnnBackend::CompileLocked(
    std::shared_ptr<const Graph> graph, const Shape& input_shape) {
  const std::string key = ShapeKey(graph->id(), input_shape);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->first == key) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().second;
    }
  }
  ASSIGN_OR_RETURN(std::vector<Shape> outputs, graph->InferShapes(input_shape));
  const GraphSpec& spec = graph->spec();
  const size_t element = DTypeSize(spec.dtype);
  std::shared_ptr<CudnnExecutable> executable(new CudnnExecutable());
  executable->backend_ = this;
  executable->graph_ = graph;
  executable->input_shape_ = input_shape;
  ASSIGN_OR_RETURN(executable->weights_, WeightsLocked(*graph));

  int64_t largest = 0;
  for (const Shape& shape : outputs) largest = std::max(largest, NumElements(shape));
  ASSIGN_OR_RETURN(executable->input_, DeviceBuffer::Create(NumElements(input_shape) * element));
  ASSIGN_OR_RETURN(executable->ping_, DeviceBuffer::Create(largest * element));
  if (outputs.size() > 1) {
    ASSIGN_OR_RETURN(executable->pong_, DeviceBuffer::Create(largest * element));
  }

  ConvLayerPlanner planner(handle_.get(), options_.selection, versions_.target());
  std::vector<ConvLayerProblem> problems = MakeLayerProblems(*graph, input_shape, outputs);
  int64_t workspace = 0;
  SearchOptions search;
  search.programmatic_entry = options_.programmatic_entry;
  for (size_t i = 0; i < problems.size(); ++i) {
    ConvLayerProblem& problem = problems[i];
    const absl::Time build_start = absl::Now();
    std::optional<ConvLayerPlan> plan;
    absl::StatusOr<SearchReport> report =
        SearchEngines(planner, stream_.get(), problem, search, nullptr, &plan);
    if (!report.ok()) {
      return absl::Status(report.status().code(),
                          absl::StrCat("graph '", graph->name(), "' layers[", i, "]: ",
                                       report.status().message()));
    }
    spdlog::info("plan built: graph '{}' layers[{}] {}: {}, workspace {} B, {} in {:.1f} ms",
                 graph->name(), i, problem.Describe(), plan->id().ToString(),
                 plan->workspace_bytes(), EngineSearchName(options_.selection.search),
                 absl::ToDoubleMilliseconds(absl::Now() - build_start));
    if (options_.programmatic_entry && plan->path() != LayerPath::kDirect) {
      // The search tested it (SearchOptions::programmatic_entry); its
      // result says what it found.
      for (const CandidateResult& result : report->results) {
        if (!result.ok || result.id != plan->id()) continue;
        spdlog::info("graph '{}' layers[{}]: {}", graph->name(), i, result.detail);
      }
    }
    workspace = std::max(workspace, plan->workspace_bytes());
    executable->problems_.push_back(std::move(problem));
    executable->plans_.push_back(*std::move(plan));
  }
  ASSIGN_OR_RETURN(executable->workspace_, DeviceBuffer::Create(workspace));
  for (size_t i = 0; i < executable->plans_.size(); ++i) {
    RETURN_IF_ERROR(
        executable->plans_[i].Bind(executable->problems_[i], executable->BuffersFor(i)));
  }

  lru_.emplace_front(key, executable);
  while (static_cast<int>(lru_.size()) > std::max(options_.max_cached_executables, 1)) {
    lru_.pop_back();
  }
  return executable;
}

absl::Status CudnnExecutable::Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                                  const CancelCheck& cancelled) {
  const size_t element = DTypeSize(graph_->spec().dtype);
  if (input.size() != static_cast<size_t>(NumElements(input_shape_)) * element ||
      output.size() != static_cast<size_t>(NumElements(output_shape())) * element) {
    return absl::InternalError("input or output size does not match the compiled shape");
  }
  absl::MutexLock lock(&backend_->mu_);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_->options_.device));
  cudaStream_t stream = backend_->stream_.get();
  cudnnHandle_t handle = backend_->handle_.get();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(input_.data(), input.data(), input.size(),
                                       cudaMemcpyHostToDevice, stream));
  const void* x = nullptr;
  RETURN_IF_ERROR(EnqueueLayers(handle, stream, cancelled, &x));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(output.data(), x, output.size(), cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace convserve

namespace convserve {

ConvLayerBuffers CudnnExecutable::BuffersFor(size_t layer) const {
  ConvLayerBuffers buffers;
  buffers.x = layer == 0 ? input_.data() : (layer % 2 == 1 ? ping_.data() : pong_.data());
  buffers.y = layer % 2 == 0 ? ping_.data() : pong_.data();
  buffers.w = weights_->weights(layer);
  buffers.w_tf32 = weights_->tf32_weights(layer);
  buffers.w_narrow = weights_->narrow_weights(layer);
  buffers.bias = weights_->bias(layer);
  buffers.workspace = workspace_.data();
  return buffers;
}

absl::Status CudnnExecutable::EnqueueLayers(cudnnHandle_t handle, cudaStream_t stream,
                                            const CancelCheck& cancelled,
                                            const void** output) const {
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (i > 0 && cancelled && cancelled()) {
      return LayersCancelledError(*graph_, i, plans_.size());
    }
    RETURN_IF_ERROR(plans_[i].RunBound(handle, stream, problems_[i]));
  }
  const void* x = BuffersFor(plans_.size() - 1).y;
  *output = x;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CudnnExecutable::TimeDeviceRuns(int warmup, int samples,
                                                                   int runs_per_sample) {
  absl::MutexLock lock(&backend_->mu_);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(backend_->options_.device));
  cudaStream_t stream = backend_->stream_.get();
  cudnnHandle_t handle = backend_->handle_.get();
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
  const void* output = nullptr;
  for (int i = 0; i < warmup; ++i) {
    RETURN_IF_ERROR(EnqueueLayers(handle, stream, CancelCheck(), &output));
  }
  std::vector<float> times;
  runs_per_sample = std::max(runs_per_sample, 1);
  for (int i = 0; i < samples; ++i) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
    for (int r = 0; r < runs_per_sample; ++r) {
      RETURN_IF_ERROR(EnqueueLayers(handle, stream, CancelCheck(), &output));
    }
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    times.push_back(ms / runs_per_sample);
  }
  return times;
}

}  // namespace convserve
