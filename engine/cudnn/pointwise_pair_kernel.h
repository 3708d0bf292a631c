// The pointwise pair's kernel (engine/cudnn/pointwise_pair.h says which
// pairs it runs).
#ifndef CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_
#define CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"

namespace convserve {

// The device pointers of one run: x (C0 channels last), each layer's
// weights (K x C: a 1x1 conv's weights are the same bytes in either layout)
// and bias (null when the layer has none), and y (C2 channels last). x, the
// weights and y 16-byte aligned; y must not overlap x.
struct PointwisePairBuffers {
  const void* x = nullptr;
  const void* w0 = nullptr;
  const void* bias0 = nullptr;
  const void* w1 = nullptr;
  const void* bias1 = nullptr;
  void* y = nullptr;
};

// Shared memory a block may use on the current GPU (the opt-in limit), for
// PointwisePairRejection.
absl::StatusOr<int64_t> PointwisePairSharedLimit();
// How a run of the pair is launched: `blocks` blocks, the second conv's
// output channels split in `slices` (each block computes one slice, the
// whole first conv included, for its tiles), blocks a multiple of slices.
struct PointwisePairGrid {
  int blocks = 0;
  int slices = 1;
};
// The grids to race for a run of the pair on the current GPU, each with as
// many blocks as are resident at once (they loop over the tiles), at most
// one per tile and slice: one slice; then, when C2 is 64 and the tiles
// leave at least half the resident blocks idle (ResNet-50's pair at batch
// 1: 25 tiles), two slices of 32, for twice the blocks.
// PointwisePairRejection must be "".
absl::StatusOr<std::vector<PointwisePairGrid>> PointwisePairGrids(
    const ConvLayerProblem& first, const ConvLayerProblem& second);
// Queues the pair on `stream` with a grid from PointwisePairGrids.
// INVALID_ARGUMENT for a missing or misaligned buffer or a grid whose
// slices do not divide its blocks and C2; launch errors otherwise.
absl::Status LaunchPointwisePair(const ConvLayerProblem& first, const ConvLayerProblem& second,
                                 const PointwisePairBuffers& buffers,
                                 const PointwisePairGrid& grid, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_
