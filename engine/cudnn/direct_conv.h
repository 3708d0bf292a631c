// convserve's own convolution kernels, the "direct" layer path: autotune
// races them against cuDNN's engines, timed the same way, and keeps the
// faster (issue 12). Five engines, each applying the bias and activation
// before the one rounding, as a fused cuDNN plan does:
//
// Engine 0, depthwise 2-D convolution (groups == C == K). cuDNN's depthwise
// kernels on the H100 ran at 4-25% of the memory-bandwidth floor; a
// depthwise conv does ~R*S multiply-adds per element it reads, so it is
// bound by memory, not math. Knob 0 is the output columns one thread
// computes (1, 2 or 4); knob 1, on channels-last layers only, the largest
// channel vector one thread loads, in bytes (16 or 8: half the registers,
// twice the threads).
//
// Engine 1, implicit GEMM for dense 2-D convolutions (groups == 1),
// channels-last, C a multiple of one step's channels (DirectGemmChunk: 32
// for float16 and bfloat16, 16 for float32) and K of 8: a block computes
// kDirectGemmTilePixels output pixels by 32 or 64 output channels (knob 2)
// with wgmma (mma.sync where the build has no sm_90a code), and the
// reduction (R*S*C) is split across the 1, 2, 4 or 8
// blocks of a thread-block cluster (knob 3), which add their partial sums
// through distributed shared memory (so no workspace and one launch).
// float32 layers multiply in TF32 (inputs rounded to 10 mantissa bits,
// float32 sums), as cuDNN's tensor-core engines and PyTorch's default do;
// --strict_float32 refuses it (ConfigRejection). It is for layers with too
// few output tiles to fill the GPU: at batch 1, cuDNN's engines ran
// ResNet-50's 3x3 layers at 3-12% of the floor (docs/cudnn.md, "Dense
// layers"). Clusters need compute capability 9.0 (ConfigRejection refuses
// it below).
//
// Engine 2, the narrow implicit GEMM, for the dense channels-last layers
// engine 1 cannot take (C not a multiple of its step) whose kernel rows are
// short: dilation 1 along W and S*C at most kDirectNarrowMaxRow elements,
// like a network's first conv (7x7 on 3 channels: rows of 21). A kernel row
// of one output pixel then reads S*C contiguous input elements, so a block
// stages the input rows its pixels read in shared memory once and its MMAs
// read their A fragments there, with no im2col copy. Knob 4 is the output
// pixels of one output row a block computes at a time (64 or 128: 32 per
// warp), by kDirectNarrowTileChannels output channels; float32
// multiplies in TF32, as in engine 1. Its weights are packed when they are
// uploaded, in the layout a block keeps (DirectNarrowPackedWeights). cuDNN
// ran ResNet-50's stem at 17-21% of its floor at batch 32 (docs/cudnn.md).
//
// Engine 3, the pointwise GEMM, for 1x1 convs with stride 1 and no padding
// on 32 or 64 channels (channels-last; float32 in TF32) into K, a multiple
// of 32 up to kDirectPointwiseMaxChannels: the pointwise pair kernel's
// first conv on its own (engine/cudnn/direct_pointwise.cu). Blocks keep
// the weights in shared memory and stream 128-pixel tiles through it; knob
// 5 is the blocks launched per SM (2 or 1, where their shared memory fits),
// knob 2 the output channels a block computes (64 or 128; absent: all K),
// so that a layer of few tiles (batch 1) has K/knob 2 times the blocks, and
// a float32 layer whose weights for all K do not fit runs at all. For the
// layers with many pixels and a short reduction, memory-bound, where
// cuDNN ran at 57-69% of the bandwidth floor (ResNet-50's 64->64 and
// 64->256 at batch 32), and float32 64->256 at batch 1.
//
// Engine 4, the halo GEMM, for 3x3 convs with stride and dilation 1 (any
// padding) on 32, 64, 128 or 256 channels (channels-last; float32 in TF32)
// into K, a multiple of 32 (engine/cudnn/direct_halo.cu). Blocks keep the
// weights of 32 or 64 output channels (knob 2) in shared memory and loop over
// tiles of 4 or 8 output rows (knob 6) by kDirectHaloTileColumns columns,
// copying the input a tile reads, with its 1-pixel halo, once: its MMAs read
// each tap's A fragments from that copy, so the input is read about 1.5 times
// instead of 9. For ResNet-50's 3x3 64 @ 56. On 256 channels (float32: 128
// and 256), for layers of few tiles (batch 1), knob 7 splits the taps across
// a cluster of 3 blocks, a kernel row each, which add their sums through
// distributed shared memory: a third of the weights a block, which then fit.
// Split tiles whose two halo buffers do not fit run with one (knob 9): the
// next tile's copy then waits for this tile's MMAs. So float32 256 fits,
// and 8-row tiles on 256 16-bit or 128 float32 channels.
//
// On the direct path an EngineConfigId names our engine and its knobs in our
// own numbering ("direct:e0:k0=2,k1=16", "direct:e1:k2=64,k3=4",
// "direct:e2:k4=128,k8=16", "direct:e3:k5=2", "direct:e4:k2=64,k6=4,k7=3",
// "direct:e4:k2=32,k6=4,k7=3,k9=1").
// This file is the part that needs no GPU (which problems and
// configurations exist); the kernels are in direct_conv_kernel.h.
#ifndef CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_
#define CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/tensor.h"

namespace convserve {

// The direct path's revision, in the plan store's policy key: raised with
// each engine or configuration added, or an engine made faster (now 13:
// engines 0-4, engine 3's output-channel slices and float32, engine 4's
// split taps and one-buffer tiles, engine 2's warps of 16 pixels and packed
// weights and engine 1's cluster mailbox and epilogue of the rows that hold
// a pixel), so that engine choices stored by an older server, which never
// raced the new ones, are searched again.
inline constexpr int kDirectPathRevision = 13;
inline constexpr int64_t kDirectDepthwiseEngine = 0;
inline constexpr int64_t kDirectKnobColumns = 0;
inline constexpr int64_t kDirectKnobVectorBytes = 1;
inline constexpr int64_t kDirectGemmEngine = 1;
inline constexpr int64_t kDirectKnobTileChannels = 2;
inline constexpr int64_t kDirectKnobSplits = 3;
// The GEMM engine's output pixels per block, and the bytes of one step of
// the reduction (one tap's channels) per pixel and per output channel.
inline constexpr int64_t kDirectGemmTilePixels = 64;
inline constexpr int64_t kDirectGemmChunkBytes = 64;
// The most blocks a cluster splits a reduction across (the portable limit).
inline constexpr int kDirectGemmMaxSplits = 8;
// The compute capability (major*10 + minor) the GEMM engine needs.
inline constexpr int kDirectGemmComputeCapability = 90;
inline constexpr int64_t kDirectNarrowEngine = 2;
inline constexpr int64_t kDirectKnobTilePixels = 4;
// Knob 8: the narrow GEMM's output pixels a warp, 32 (two m16 tiles; the
// knob left out) or 16 (one; twice the warps a tile, for 128-pixel tiles).
inline constexpr int64_t kDirectKnobWarpPixels = 8;
// The shared memory one block of the direct engines may use (an H100's
// opt-in limit), and an H100's shared memory per SM, 1 KiB of it reserved
// for each block (for the configurations' best guess at blocks an SM).
inline constexpr int64_t kDirectMaxSharedBytes = 227 << 10;
inline constexpr int64_t kDirectSharedBytesPerSm = 228 << 10;
// The narrow GEMM's longest kernel row (S*C elements), the output channels
// of a block and the compute capability it needs (mma.sync on 16-bit types
// and TF32).
inline constexpr int64_t kDirectNarrowMaxRow = 48;
inline constexpr int64_t kDirectNarrowTileChannels = 64;
inline constexpr int kDirectNarrowComputeCapability = 80;
inline constexpr int64_t kDirectPointwiseEngine = 3;
inline constexpr int64_t kDirectKnobBlocksPerSm = 5;
// The pointwise GEMM's most output channels (16-bit weights of 512 on 64
// channels and two input tiles take 110 KiB of shared memory: two blocks an
// SM on an H100) and the compute capability it needs (mma.sync).
inline constexpr int64_t kDirectPointwiseMaxChannels = 512;
inline constexpr int kDirectPointwiseComputeCapability = 80;
// The shared memory a block of the pointwise GEMM takes on `c` input
// channels of `element_bytes` each computing `channels` output channels:
// their weights (16-bit: rows of c elements and 16 bytes; float32: c
// elements, swizzled), two 128-pixel input tiles (rows of c elements and
// 16 bytes) and the bias in float.
constexpr int64_t DirectPointwiseSharedBytes(int64_t c, int64_t channels,
                                             int64_t element_bytes = 2) {
  const int64_t pad = 16 / element_bytes;
  return (channels * (element_bytes == 4 ? c : c + pad) + 2 * kPointwisePairTile * (c + pad)) *
             element_bytes +
         channels * 4;
}
inline constexpr int64_t kDirectHaloEngine = 4;
inline constexpr int64_t kDirectKnobTileRows = 6;
// Knob 7: the blocks of a thread-block cluster the halo GEMM splits a 3x3
// window's taps across (3: one kernel row each), for 256 input channels on
// layers of few tiles; clusters need compute capability 9.0.
inline constexpr int64_t kDirectKnobTapSplit = 7;
inline constexpr int64_t kDirectHaloSplit = 3;
// Knob 9: the halo GEMM's halo buffers, 1 (left out: 2, one tile's input
// copied while the previous tile's MMAs run).
inline constexpr int64_t kDirectKnobHaloBuffers = 9;
// The halo GEMM's most bytes of a pixel's channels unsplit (128 16-bit
// channels, 64 float); more (256, or 128 and 256 float) run split only.
inline constexpr int64_t kDirectHaloMaxUnsplitBytes = 256;
// The halo GEMM's output columns a tile (one warp's 16 MMA rows) and the
// compute capability it needs (mma.sync). On 128 channels its 64-channel
// tile of 8 rows is over kDirectMaxSharedBytes.
inline constexpr int64_t kDirectHaloTileColumns = 16;
inline constexpr int kDirectHaloComputeCapability = 80;
// Kernel taps (R*S) the depthwise engine keeps in shared memory per channel.
inline constexpr int64_t kDirectMaxTaps = 256;
// Elements of the input or the output the engine indexes (32-bit).
inline constexpr int64_t kDirectMaxElements = (int64_t{1} << 31) - 1;

// The reduction elements (one tap's channels) of one GEMM step for `dtype`.
int64_t DirectGemmChunk(DType dtype);

// The narrow GEMM's shared-memory layout for `problem` with `tile_pixels`
// output pixels per block. The reduction is laid out in 16-byte groups
// (8 float16 or bfloat16 elements, 4 float32): each kernel row's S*C
// elements padded to `groups` groups, and an MMA step takes two groups.
struct DirectNarrowLayout {
  int64_t row = 0;            // S*C: the input elements a kernel row reads
  int64_t groups = 0;         // 16-byte groups per kernel row
  int64_t steps = 0;          // MMA steps: R*groups/2, rounded up
  int64_t pixel_step = 0;     // stride_w*C: elements between two pixels' rows
  int64_t weight_stride = 0;  // elements per output channel's weights
  int64_t input_stride = 0;   // elements per staged input row
  int64_t span = 0;           // input rows a tile reads: (R-1)*dilation_h+1
  int64_t shared_bytes = 0;   // weights, staged rows (a ring), steps
};
DirectNarrowLayout DirectNarrowLayoutOf(const ConvLayerProblem& problem, int64_t tile_pixels);

// The narrow GEMM's weights packed as its blocks keep them in shared
// memory, so that a block copies its 64 output channels' 16 bytes a load
// with no arithmetic (ConvLayerBuffers::w_narrow): for each output channel
// (K rounded up to 64, the rest zeros), weight_stride elements
// (DirectNarrowLayoutOf): its R kernel rows of S*C elements, each padded
// with zeros to whole 16-byte groups, then zeros; float32 rounded to TF32.
// Its size in bytes, 0 where the narrow GEMM does not run `problem`'s
// kernel (dtype, layout, channels and kernel shape; the input's size does
// not matter).
int64_t DirectNarrowPackedBytes(const ConvLayerProblem& problem);
// `krsc` (the layer's weights, KRSC) packed so; empty where
// DirectNarrowPackedBytes is 0 or `krsc` is not K*R*S*C elements.
std::string DirectNarrowPackedWeights(const ConvLayerProblem& problem, const std::string& krsc);

// Why the pointwise GEMM (engine 3) does not run `problem`, or "" when it
// does (the implicit GEMM runs every such layer too).
std::string DirectPointwiseRejection(const ConvLayerProblem& problem);

// Why the halo GEMM (engine 4) does not run `problem`, or "" when it does
// (the implicit GEMM runs every such layer too). On 256 channels its
// configurations are listed for layers of few tiles only, so a layer it
// "runs" may have none (DirectConvConfigs).
std::string DirectHaloRejection(const ConvLayerProblem& problem);
// The shared memory a block of the halo GEMM takes on `c` input channels
// of `element_bytes` each with tiles of `rows` output rows by `channels`
// output channels, its taps split across `split` blocks (1, or 3: a kernel
// row each): the weights (9 / split taps of channels x c), `buffers` halos
// of rows + 2 (rows, split) by kDirectHaloTileColumns + 2 pixels (rows of c
// elements and 16 bytes), each warp's 16 staged output rows (channels
// elements and 16 bytes), the bias in float and, split, a mailbox of each
// thread's float sums (channels / 2) and its two 8-byte barriers.
constexpr int64_t DirectHaloSharedBytes(int64_t c, int64_t rows, int64_t channels,
                                        int64_t split = 1, int64_t element_bytes = 2,
                                        int64_t buffers = 2) {
  const int64_t halo =
      (split == 1 ? rows + 2 : rows) * (kDirectHaloTileColumns + 2) * (c * element_bytes + 16);
  const int64_t staged = rows * 16 * (channels * element_bytes + 16);
  const int64_t sums = split == 1 ? 0 : rows * 32 * (channels / 2);
  return 9 / split * channels * c * element_bytes + buffers * halo + staged +
         (channels + sums) * 4 + (split == 1 ? 0 : 16);
}
// The halo buffers of the tile these arguments name: 2 where they fit in
// kDirectMaxSharedBytes, else 1 where the taps split and one fits, else 0
// (the tile does not run).
constexpr int64_t DirectHaloBuffers(int64_t c, int64_t rows, int64_t channels, int64_t split,
                                    int64_t element_bytes) {
  for (int64_t buffers = 2; buffers >= (split == 1 ? 2 : 1); --buffers) {
    if (DirectHaloSharedBytes(c, rows, channels, split, element_bytes, buffers) <=
        kDirectMaxSharedBytes) {
      return buffers;
    }
  }
  return 0;
}
inline int64_t DirectHaloSharedBytes(const ConvLayerProblem& problem, int64_t rows,
                                     int64_t channels, int64_t split = 1, int64_t buffers = 2) {
  return DirectHaloSharedBytes(problem.input[1], rows, channels, split,
                               static_cast<int64_t>(DTypeSize(problem.dtype)), buffers);
}

// Whether the direct path has an engine for `problem`'s kind of layer at all
// (a 2-D depthwise or dense conv), so the search tries the path.
bool DirectPathApplies(const ConvLayerProblem& problem);
// Why no direct engine runs `problem`, or "" when one does.
std::string DirectConvRejection(const ConvLayerProblem& problem);
// The direct path's configurations for `problem`, best guess first (the
// order heuristic policies try them in); empty when DirectConvRejection is
// not "".
std::vector<EngineConfigId> DirectConvConfigs(const ConvLayerProblem& problem);
// The value of knob `type` in `id`, or 0 when `id` does not set it.
int64_t DirectKnob(const EngineConfigId& id, int64_t type);
// Why `id` is not a direct configuration that runs `problem`, or "".
std::string DirectConfigRejection(const ConvLayerProblem& problem, const EngineConfigId& id);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_
