// Builds cuDNN execution plans for one conv -> bias -> activation layer.
//
// Fused path: one operation graph, conv forward (virtual float output) ->
// pointwise ADD bias [1,K,1,1] (virtual float) -> pointwise activation -> Y.
// Unfused path, when no engine runs the fused graph (runtime fusion needs
// NHWC and aligned channels; depthwise and odd channel counts often fail):
// a conv-only plan writing Y, then LaunchBiasActivation in place.
#ifndef CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_
#define CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/activation.h"
#include "engine/cudnn/backend_descriptor.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

// Everything about one layer's shapes and math, no pointers.
struct ConvLayerProblem {
  DType dtype = DType::kFloat32;
  bool channels_last = false;
  // Logical N, C, spatial...; K, C/groups, spatial...; N, K, spatial....
  Shape input;
  Shape weights;
  Shape output;
  std::vector<int64_t> stride, dilation, pad_before, pad_after;
  bool has_bias = false;
  Activation activation;

  // True when the plan alone cannot produce Y (there is a bias or an activation).
  bool needs_epilogue() const {
    return has_bias || activation.kind != ActivationKind::kIdentity;
  }
  std::string Describe() const;
};

// The problems of every layer of `graph` for a checked input shape, with
// `outputs` from Graph::InferShapes.
std::vector<ConvLayerProblem> MakeLayerProblems(const Graph& graph, const Shape& input_shape,
                                                const std::vector<Shape>& outputs);

// The device pointers one execution uses.
struct ConvLayerBuffers {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // null when the layer has no bias
  void* y = nullptr;
  void* workspace = nullptr;
};

enum class LayerPath {
  kFused,    // one cuDNN plan does conv, bias and activation
  kUnfused,  // cuDNN conv plan + our bias+activation kernel
};
const char* LayerPathName(LayerPath path);

// A finalized plan and the descriptors it was built from. Movable.
class ConvLayerPlan {
 public:
  LayerPath path() const { return path_; }
  int64_t engine_index() const { return engine_index_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Median time per run when autotuned, else 0.
  float measured_ms() const { return measured_ms_; }

  // Fixes the buffers of every later RunBound (an executable's buffers never
  // move), so running does not rebuild cuDNN's variant pack each time.
  absl::Status Bind(const ConvLayerProblem& problem, const ConvLayerBuffers& buffers);
  bool IsBoundTo(const ConvLayerBuffers& buffers) const {
    return bound_pack_.get() != nullptr && bound_buffers_.x == buffers.x &&
           bound_buffers_.w == buffers.w && bound_buffers_.bias == buffers.bias &&
           bound_buffers_.y == buffers.y && bound_buffers_.workspace == buffers.workspace;
  }
  // Runs the layer on the handle's stream: the plan, then the epilogue kernel
  // on the unfused path.
  absl::Status RunBound(cudnnHandle_t handle, cudaStream_t stream,
                        const ConvLayerProblem& problem) const;

 private:
  friend class ConvLayerPlanner;

  LayerPath path_ = LayerPath::kFused;
  int64_t engine_index_ = -1;
  int64_t workspace_bytes_ = 0;
  float measured_ms_ = 0;
  // Operation graph parts must outlive the plan that refers to them.
  std::vector<BackendDescriptor> parts_;
  BackendDescriptor plan_;
  BackendDescriptor bound_pack_;
  ConvLayerBuffers bound_buffers_;
};

// Finds and builds plans. Callers serialize use of `handle`.
class ConvLayerPlanner {
 public:
  ConvLayerPlanner(cudnnHandle_t handle, cudaStream_t stream, const EngineSelection& selection)
      : handle_(handle), stream_(stream), selection_(selection) {}

  // The best plan under the selection policy: fused when any engine runs the
  // fused graph (unless autotune finds the unfused path faster), else
  // unfused. `buffers` are used only by autotune, to time candidates; their
  // contents are overwritten. UNIMPLEMENTED when no engine supports even the
  // conv alone, with cuDNN's reason.
  absl::StatusOr<ConvLayerPlan> Build(const ConvLayerProblem& problem,
                                      const ConvLayerBuffers& buffers);

  // The plan for an engine already chosen (by Build on another worker or
  // GPU of the same model): no search, no timing. NOT_FOUND when this
  // engine is not offered here.
  absl::StatusOr<ConvLayerPlan> BuildChosen(const ConvLayerProblem& problem, LayerPath path,
                                            int64_t engine_index);

 private:
  struct Candidates;
  absl::StatusOr<Candidates> FindCandidates(const ConvLayerProblem& problem, bool fused);
  absl::Status FinalizePlan(const BackendDescriptor& config, ConvLayerPlan* plan);
  absl::StatusOr<float> TimePlan(const ConvLayerPlan& plan, const ConvLayerProblem& problem,
                                 const ConvLayerBuffers& buffers);

  cudnnHandle_t handle_;
  cudaStream_t stream_;
  const EngineSelection& selection_;  // owned by the backend, which outlives planners
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_
