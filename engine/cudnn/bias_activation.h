// The unfused path's second half: y = activation(conv + bias[channel]), one
// vectorized pass, every dtype and activation. The conv output is either a
// float32 tensor (16-bit graphs: the result is rounded once, as a fused plan
// rounds) or y itself in the graph dtype (computed in place). Used when no
// cuDNN engine runs the fused conv-bias-activation graph.
#ifndef CONVSERVE_ENGINE_CUDNN_BIAS_ACTIVATION_H_
#define CONVSERVE_ENGINE_CUDNN_BIAS_ACTIVATION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/activation.h"
#include "engine/tensor.h"

namespace convserve {

struct BiasActivationArgs {
  // Element type of y and bias.
  DType dtype = DType::kFloat32;
  // NHWC/NDHWC when true, else NCHW/NCDHW.
  bool channels_last = false;
  // Dims of y: batch, channels, product of spatial dims.
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t spatial = 0;
  // Device pointers; `bias` may be null (activation only).
  void* y = nullptr;
  // The conv output in float32, or null when it is y itself (in place).
  const void* float_input = nullptr;
  const void* bias = nullptr;
  Activation activation;
};

// Queues the kernel on `stream`; errors are launch errors.
absl::Status LaunchBiasActivation(const BiasActivationArgs& args, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_BIAS_ACTIVATION_H_
