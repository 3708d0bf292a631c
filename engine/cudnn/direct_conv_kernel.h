// The direct path's kernels (engine/cudnn/direct_conv.h says which problems
// and configurations they run).
#ifndef CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_
#define CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"

namespace convserve {

struct DirectConvBuffers {
  const void* x = nullptr;
  // Depthwise weights, K x 1 x R x S (the same bytes in either layout).
  const void* w = nullptr;
  const void* bias = nullptr;  // null when the layer has no bias
  void* y = nullptr;
};

// INVALID_ARGUMENT when `id` does not run `problem` or a tensor pointer is
// not 16-byte aligned (as every tensor is declared to cuDNN).
absl::Status CheckDirectConv(const ConvLayerProblem& problem, const EngineConfigId& id,
                             const DirectConvBuffers& buffers);
// Queues configuration `id` of the direct path for `problem` on `stream`
// (CheckDirectConv first); errors are launch errors.
absl::Status LaunchDirectConv(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const DirectConvBuffers& buffers, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_
