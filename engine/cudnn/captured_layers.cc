#include "engine/cudnn/captured_layers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"

namespace convserve {
namespace {

// Owns a captured (not yet instantiated) graph.
struct GraphOwner {
  cudaGraph_t graph = nullptr;
  GraphOwner() = default;
  GraphOwner(const GraphOwner&) = delete;
  GraphOwner& operator=(const GraphOwner&) = delete;
  GraphOwner(GraphOwner&& other) noexcept : graph(std::exchange(other.graph, nullptr)) {}
  ~GraphOwner() {
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

std::string Describe(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

}  // namespace

CapturedLayers::~CapturedLayers() {
  // An executable still in flight is freed when it completes (CUDA defers
  // the destruction), so dropping one from another thread is safe.
  for (cudaGraphExec_t exec : execs_) cudaGraphExecDestroy(exec);
}

cudaError_t CapturedLayers::Launch(size_t index, cudaStream_t stream) const {
  return cudaGraphLaunch(execs_[index], stream);
}

absl::StatusOr<CapturedLayers::Result> CapturedLayers::Capture(
    cudaStream_t stream, const std::vector<size_t>& segment_ends, const LaunchLayers& launch,
    std::shared_ptr<CapturedLayers> reuse) {
  Result result;
  // Ends a failed attempt: the thread's last (non-sticky) error is cleared,
  // so later calls do not report it; a sticky one goes to the fault path.
  const auto fail = [&](cudaError_t error, const absl::Status& launched,
                        const std::string& what) -> absl::StatusOr<Result> {
    cudaGetLastError();
    cudaError_t sticky = IsStickyCudaError(error) ? error : StickyCudaError(launched, stream);
    if (sticky == cudaSuccess) {
      // A capture error can hide a fault the launches made before capture
      // began; the stream knows.
      const cudaError_t now = cudaStreamQuery(stream);
      if (IsStickyCudaError(now)) sticky = now;
    }
    if (sticky != cudaSuccess) {
      return CudaError(sticky, what.c_str(), __FILE__, __LINE__);
    }
    cudaGetLastError();
    result.captured = nullptr;
    result.failure = what;
    return result;
  };

  std::vector<GraphOwner> graphs(segment_ends.size());
  size_t begin = 0;
  for (size_t s = 0; s < segment_ends.size(); ++s) {
    const cudaError_t began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (began != cudaSuccess) {
      return fail(began, absl::OkStatus(),
                  absl::StrCat("cudaStreamBeginCapture: ", Describe(began)));
    }
    const absl::Status launched = launch(begin, segment_ends[s]);
    // Always ended, also after a failed launch, so the stream leaves
    // capture mode.
    const cudaError_t ended = cudaStreamEndCapture(stream, &graphs[s].graph);
    if (!launched.ok()) {
      return fail(ended, launched,
                  absl::StrCat("layers ", begin, "..", segment_ends[s] - 1,
                               " while capturing: ", launched.message()));
    }
    if (ended != cudaSuccess || graphs[s].graph == nullptr) {
      return fail(ended, absl::OkStatus(),
                  absl::StrCat("cudaStreamEndCapture: ", Describe(ended)));
    }
    begin = segment_ends[s];
  }

  if (reuse != nullptr && reuse->execs_.size() == graphs.size()) {
    bool updated = true;
    for (size_t s = 0; s < graphs.size() && updated; ++s) {
      cudaGraphExecUpdateResultInfo info;
      const cudaError_t error = cudaGraphExecUpdate(reuse->execs_[s], graphs[s].graph, &info);
      if (error != cudaSuccess) {
        if (IsStickyCudaError(error)) {
          return CudaError(error, "cudaGraphExecUpdate", __FILE__, __LINE__);
        }
        cudaGetLastError();  // not updatable (topology changed): instantiate instead
        updated = false;
      }
    }
    if (updated) {
      result.captured = std::move(reuse);
      result.updated = true;
      return result;
    }
  }

  std::shared_ptr<CapturedLayers> captured(new CapturedLayers());
  for (size_t s = 0; s < graphs.size(); ++s) {
    cudaGraphExec_t exec = nullptr;
    const cudaError_t error = cudaGraphInstantiate(&exec, graphs[s].graph, 0);
    if (error != cudaSuccess) {
      return fail(error, absl::OkStatus(),
                  absl::StrCat("cudaGraphInstantiate: ", Describe(error)));
    }
    captured->execs_.push_back(exec);
  }
  result.captured = std::move(captured);
  return result;
}

}  // namespace convserve
