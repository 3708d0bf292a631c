// convserve's own convolution kernels, the "direct" layer path: autotune
// races them against cuDNN's engines, timed the same way, and keeps the
// faster (issue 12). Two engines, each applying the bias and activation
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
// with mma.sync, and the reduction (R*S*C) is split across the 1, 2, 4 or 8
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
// On the direct path an EngineConfigId names our engine and its knobs in our
// own numbering ("direct:e0:k0=2,k1=16", "direct:e1:k2=64,k3=4"). This file
// is the part that needs no GPU (which problems and configurations exist);
// the kernels are in direct_conv_kernel.h.
#ifndef CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_
#define CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/tensor.h"

namespace convserve {

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
// Kernel taps (R*S) the depthwise engine keeps in shared memory per channel.
inline constexpr int64_t kDirectMaxTaps = 256;
// Elements of the input or the output the engine indexes (32-bit).
inline constexpr int64_t kDirectMaxElements = (int64_t{1} << 31) - 1;

// The reduction elements (one tap's channels) of one GEMM step for `dtype`.
int64_t DirectGemmChunk(DType dtype);

// Whether the direct path has an engine for `problem`'s kind of layer at all
// (a 2-D depthwise or dense conv), so the search tries the path.
bool DirectPathApplies(const ConvLayerProblem& problem);
// Why no direct engine runs `problem`, or "" when one does.
std::string DirectConvRejection(const ConvLayerProblem& problem);
// The direct path's configurations for `problem`, best guess first (the
// order heuristic policies try them in); empty when DirectConvRejection is
// not "".
std::vector<EngineConfigId> DirectConvConfigs(const ConvLayerProblem& problem);
// Why `id` is not a direct configuration that runs `problem`, or "".
std::string DirectConfigRejection(const ConvLayerProblem& problem, const EngineConfigId& id);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_
