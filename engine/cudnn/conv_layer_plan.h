// Execution plans for one conv -> bias -> activation layer.
//
// Fused path: one operation graph, conv forward (virtual float output) ->
// pointwise ADD bias [1,K,1,1] (virtual float) -> pointwise activation -> Y.
// Unfused path, when no engine runs the fused graph (runtime fusion needs
// NHWC and aligned channels; depthwise and odd channel counts often fail):
// a conv-only plan writing float32 (into scratch for 16-bit graphs), then
// LaunchBiasActivation writing Y; only where no engine writes float32 does
// the conv write Y in the graph dtype (kUnfusedRounding).
#ifndef CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_
#define CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/backend_descriptor.h"
#include "engine/cudnn/conv_operation_graph.h"
#include "engine/cudnn/engine_candidates.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/cudnn/engine_selection.h"

namespace convserve {

// The device pointers one execution uses.
struct ConvLayerBuffers {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // null when the layer has no bias
  void* y = nullptr;
  // At least ConvLayerPlan::workspace_bytes(), 256-byte aligned.
  void* workspace = nullptr;
  // float32 weights rounded to TF32 (DeviceWeights::tf32_weights), or null:
  // the direct implicit GEMM multiplies these with wgmma where it has them,
  // and otherwise `w` with mma.sync, rounding in registers.
  const void* w_tf32 = nullptr;
  // The narrow GEMM's weights packed as its blocks keep them in shared
  // memory (DeviceWeights::narrow_weights, DirectNarrowPackedWeights), or
  // null: the direct narrow GEMM needs them.
  const void* w_narrow = nullptr;
};

// A finalized plan and the descriptors it was built from. Movable.
class ConvLayerPlan {
 public:
  const EngineConfigId& id() const { return id_; }
  LayerPath path() const { return id_.path; }
  int64_t engine_index() const { return id_.engine; }
  // Device scratch one run needs: cuDNN's workspace, plus the float32 conv
  // output on the unfused path of a 16-bit graph.
  int64_t workspace_bytes() const { return scratch_offset_ + scratch_bytes_; }
  // Median time per run when a search timed it, else 0.
  float measured_ms() const { return measured_ms_; }
  void set_measured_ms(float ms) { measured_ms_ = ms; }

  // Fixes the buffers of every later RunBound (an executable's buffers never
  // move), so running does not rebuild cuDNN's variant pack each time.
  absl::Status Bind(const ConvLayerProblem& problem, const ConvLayerBuffers& buffers);
  bool IsBoundTo(const ConvLayerBuffers& buffers) const {
    return bound_ && bound_buffers_.x == buffers.x &&
           bound_buffers_.w == buffers.w && bound_buffers_.bias == buffers.bias &&
           bound_buffers_.y == buffers.y && bound_buffers_.workspace == buffers.workspace;
  }
  // Forgets the buffers Bind fixed (they are about to be freed).
  void Unbind() { bound_ = false; }
  // Whether RunBound, while `stream` is capturing, enters cuDNN's plan by a
  // programmatic edge (AdmitProgrammaticEntry, programmatic_entry.h).
  bool programmatic_entry() const { return programmatic_entry_; }
  void set_programmatic_entry(bool on) { programmatic_entry_ = on; }
  // Runs the layer on `stream` (the handle's): the plan, then the epilogue
  // kernel on the unfused paths; on the direct path, our kernel alone.
  absl::Status RunBound(cudnnHandle_t handle, cudaStream_t stream,
                        const ConvLayerProblem& problem) const;

 private:
  friend class ConvLayerPlanner;

  EngineConfigId id_;
  // cuDNN's workspace rounded up to 256 bytes, where the float32 scratch of
  // the unfused path starts; its size (0 when the conv writes Y).
  int64_t scratch_offset_ = 0;
  int64_t scratch_bytes_ = 0;
  float measured_ms_ = 0;
  // The operation graph and config descriptors the plan refers to (none on
  // the direct path).
  std::shared_ptr<const ConvOperationGraph> graph_;
  EngineCandidate candidate_;
  BackendDescriptor plan_;
  BackendDescriptor bound_pack_;
  bool bound_ = false;
  bool programmatic_entry_ = false;
  ConvLayerBuffers bound_buffers_;
};

// Finds engine candidates and finalizes plans. Callers serialize use of
// `handle`.
class ConvLayerPlanner {
 public:
  ConvLayerPlanner(cudnnHandle_t handle, const EngineSelection& selection, CudnnTarget target)
      : handle_(handle), selection_(selection), target_(std::move(target)) {}

  // The candidates of `path`, best first, after the selection's filters and
  // the errata.
  absl::StatusOr<CandidateSet> Candidates(const ConvLayerProblem& problem, LayerPath path);
  // Autotune's knob search around `center` (a cuDNN path's configuration) on
  // `graph`, the operation graph of `center`'s path: FindKnobNeighbours.
  absl::StatusOr<CandidateSet> KnobNeighbours(const ConvLayerProblem& problem,
                                              std::shared_ptr<const ConvOperationGraph> graph,
                                              const EngineConfigId& center,
                                              const std::vector<EngineConfigId>& exclude,
                                              int max);
  // `id` alone, rebuilt on `graph` (its path's operation graph), as a set of
  // one: for running a configuration by name.
  absl::StatusOr<CandidateSet> Named(std::shared_ptr<const ConvOperationGraph> graph,
                                     const EngineConfigId& id);
  // A plan from one of `set`'s candidates (taken out of the set). On the
  // direct path the set holds our configurations and no cuDNN descriptors.
  // RESOURCE_EXHAUSTED when it needs more workspace than the selection
  // allows; cuDNN's error when it does not finalize.
  absl::StatusOr<ConvLayerPlan> Finalize(const ConvLayerProblem& problem, CandidateSet& set,
                                         size_t index);
  // The plan for exactly `id` (chosen by a search elsewhere), rebuilt from
  // the engine index and knob settings without a heuristics query.
  absl::StatusOr<ConvLayerPlan> BuildConfig(const ConvLayerProblem& problem,
                                            const EngineConfigId& id);

  cudnnHandle_t handle() const { return handle_; }
  const EngineSelection& selection() const { return selection_; }
  const CudnnTarget& target() const { return target_; }

 private:
  absl::StatusOr<ConvLayerPlan> FinalizeCandidate(const ConvLayerProblem& problem,
                                                  std::shared_ptr<const ConvOperationGraph> graph,
                                                  EngineCandidate candidate);

  cudnnHandle_t handle_;
  const EngineSelection& selection_;  // owned by the caller, which outlives planners
  const CudnnTarget target_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CONV_LAYER_PLAN_H_
