// The pointwise pair's kernel (engine/cudnn/pointwise_pair.h says which
// pairs it runs).
#ifndef CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_
#define CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_

#include <cuda_runtime_api.h>

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
// The blocks a run of the pair launches on the current GPU: as many as are
// resident at once (they loop over the tiles), at most one per tile.
// PointwisePairRejection must be "".
absl::StatusOr<int> PointwisePairBlocks(const ConvLayerProblem& first,
                                        const ConvLayerProblem& second);
// Queues the pair on `stream` with `blocks` from PointwisePairBlocks.
// INVALID_ARGUMENT for a missing or misaligned buffer; launch errors
// otherwise.
absl::Status LaunchPointwisePair(const ConvLayerProblem& first, const ConvLayerProblem& second,
                                 const PointwisePairBuffers& buffers, int blocks,
                                 cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_KERNEL_H_
