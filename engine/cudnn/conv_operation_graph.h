// The cuDNN operation graph of one layer on one path: conv forward (virtual
// float output) -> pointwise ADD bias [1,K,1,1] (virtual float) -> pointwise
// activation -> Y on the fused path; a conv alone on the unfused paths,
// writing float32 (kUnfused) or the graph dtype (kUnfusedRounding).
#ifndef CONVSERVE_ENGINE_CUDNN_CONV_OPERATION_GRAPH_H_
#define CONVSERVE_ENGINE_CUDNN_CONV_OPERATION_GRAPH_H_

#include <cudnn.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/backend_descriptor.h"
#include "engine/cudnn/engine_config_id.h"

namespace convserve {

// Unique ids of the tensors a variant pack binds.
constexpr int64_t kUidX = 1;
constexpr int64_t kUidW = 2;
constexpr int64_t kUidBias = 3;
constexpr int64_t kUidY = 4;

// A finalized operation graph and every descriptor it refers to. Plans built
// from it hold it (shared), since cuDNN descriptors refer to each other.
struct ConvOperationGraph {
  std::vector<BackendDescriptor> parts;
  BackendDescriptor graph;
  // Element type of the tensor bound to kUidY.
  cudnnDataType_t y_type = CUDNN_DATA_FLOAT;
};

// True when `path` writes the conv result somewhere other than Y: a float32
// scratch tensor for a 16-bit graph on the unfused path.
bool UsesFloatScratch(const ConvLayerProblem& problem, LayerPath path);

absl::StatusOr<std::shared_ptr<const ConvOperationGraph>> BuildConvOperationGraph(
    cudnnHandle_t handle, const ConvLayerProblem& problem, LayerPath path);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CONV_OPERATION_GRAPH_H_
