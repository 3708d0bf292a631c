// Two consecutive 1x1 convs run as one kernel of ours, the "pointwise pair"
// (issue 12; docs/cudnn.md, "Fused 1x1 pairs"):
//   y = act1(conv(act0(conv(x, w0) + b0), w1) + b1)
// on 16-bit channels-last tensors. The first conv's C1-channel output never
// leaves the SM: it is computed 32 channels at a time, rounded to the dtype
// after its bias and activation (where two separate layers round), and fed
// straight to the second conv. A ResNet bottleneck stack has such a pair
// between blocks (the expand 1x1 64->256 and the next block's reduce 1x1
// 256->64): its 256-channel tensor, written and read back by two layers, is
// most of their memory traffic. The device pool races the pair against its
// two layers' plans and keeps the faster (DevicePoolOptions::fuse_pointwise_pairs).
//
// This file is the part that needs no GPU (which pairs the kernel runs, and
// the shared memory it needs); the kernel is in pointwise_pair_kernel.h.
#ifndef CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_H_
#define CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_H_

#include <cstdint>
#include <string>

#include "engine/conv_layer_problem.h"

namespace convserve {

// Pixels one block computes at a time (8 warps of 16 rows), and the
// channels of the first conv's output one step computes.
inline constexpr int64_t kPointwisePairTile = 128;
inline constexpr int64_t kPointwisePairChunk = 32;
// Elements of padding after each row of a matrix in shared memory (rows
// 16 bytes apart from the bank pattern of the one before). The wgmma path
// (sm_90a) swizzles the weights instead and leaves their padding unused.
inline constexpr int64_t kPointwisePairPad = 8;
// The outer channel counts (C0 in, C2 out) the kernel is built for: 32 or
// 64 (each further count is 4 more kernels to compile, per dtype).
inline constexpr int64_t kPointwisePairOuterChannels[] = {32, 64};

// Whether the kernels are built for `channels` (one of
// kPointwisePairOuterChannels) as the pair's C0 or C2, and the pointwise
// GEMM's input channels.
bool PointwiseKernelBuiltFor(int64_t channels);

// Why `problem` is not a 1x1 conv with stride 1 and no padding, dilation or
// groups on a 16-bit (or, where `float32`, float32) channels-last 4-D
// tensor, or "": what the pair kernel needs of each of its layers and the
// direct path's pointwise GEMM (which takes float32) of its one (`kernel`
// names it in the message).
std::string PointwiseLayerRejection(const ConvLayerProblem& problem, const char* kernel,
                                    bool float32 = false);

// The kPointwisePairTile-pixel tiles of `pixels` pixels.
inline int64_t PointwiseTiles(int64_t pixels) {
  return (pixels + kPointwisePairTile - 1) / kPointwisePairTile;
}

// The blocks of a persistent launch over `pixels` pixels whose outputs are
// split in `slices` slices, at most `max_blocks` (resident blocks an SM
// times SMs): the same number for every slice, each a block per
// kPointwisePairTile-pixel tile at most, one at least. The pair kernel's
// grid and the pointwise GEMM's (engine 3: the pair's first conv alone).
int64_t PointwiseTileBlocks(int64_t pixels, int64_t slices, int64_t max_blocks);

// Shared memory one block needs: both weight matrices, two input tiles and
// both biases (in float).
int64_t PointwisePairSharedBytes(const ConvLayerProblem& first, const ConvLayerProblem& second);
// Why `first` followed by `second` (which reads first's output) cannot run
// as a pointwise pair on a GPU whose blocks may use `shared_bytes` of shared
// memory, or "" when it can.
std::string PointwisePairRejection(const ConvLayerProblem& first, const ConvLayerProblem& second,
                                   int64_t shared_bytes);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_H_
