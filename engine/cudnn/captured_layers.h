// A request's layer launches (cudnnBackendExecute and the bias+activation
// kernel) captured by stream capture into CUDA graphs, one per cancellation
// segment (engine/runtime/layer_segments.h), and replayed with one
// cudaGraphLaunch per segment. Graphs bake in every pointer the launches
// used; engine/runtime/cuda_graph_cache.h decides when one may be replayed.
//
// Capture uses cudaStreamCaptureModeThreadLocal: other workers' threads may
// allocate or synchronize meanwhile; a call of this thread that is illegal
// while capturing (a synchronization inside a cuDNN engine, say) invalidates
// the capture, which then fails cleanly. cuDNN documents no list of engines
// that cannot be captured, so every capture is prepared to fail.
//
// Not thread-safe; a worker captures and launches on its own stream.
// Destruction may happen on any thread (a graph being unloaded).
#ifndef CONVSERVE_ENGINE_CUDNN_CAPTURED_LAYERS_H_
#define CONVSERVE_ENGINE_CUDNN_CAPTURED_LAYERS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace convserve {

class CapturedLayers {
 public:
  ~CapturedLayers();
  CapturedLayers(const CapturedLayers&) = delete;
  CapturedLayers& operator=(const CapturedLayers&) = delete;

  // Queues layers [begin, end) on the stream given to Capture.
  using LaunchLayers = std::function<absl::Status(size_t begin, size_t end)>;

  struct Result {
    // The captured segments; null when capture failed (then `failure` says
    // why, and the caller runs plain launches).
    std::shared_ptr<CapturedLayers> captured;
    // `captured` is the `reuse` argument, updated in place.
    bool updated = false;
    std::string failure;
  };

  // Captures each segment (`segment_ends` as LayerSegmentEnds gives them)
  // on `stream`. With `reuse` (an earlier capture of the same graph and
  // shape with other pointers), tries cudaGraphExecUpdate into it first.
  // Any capture, instantiate or update failure that is not a sticky CUDA
  // error ends cleanly: capture mode left, the thread's error cleared,
  // Result::failure set. A sticky error (the context is lost) is returned
  // as the status, carrying the CUDA error, for the fault path.
  static absl::StatusOr<Result> Capture(cudaStream_t stream,
                                        const std::vector<size_t>& segment_ends,
                                        const LaunchLayers& launch,
                                        std::shared_ptr<CapturedLayers> reuse);

  size_t segments() const { return execs_.size(); }
  // Queues segment `index` on `stream`; cudaGraphLaunch's error.
  cudaError_t Launch(size_t index, cudaStream_t stream) const;

 private:
  CapturedLayers() = default;

  std::vector<cudaGraphExec_t> execs_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CAPTURED_LAYERS_H_
