// convserve's own convolution kernels, the "direct" layer path: autotune
// races them against cuDNN's engines, timed the same way, and keeps the
// faster (issue 12). Today one engine: depthwise 2-D convolution (groups ==
// C == K) with the bias and activation applied before the one rounding, as
// a fused cuDNN plan does. cuDNN's depthwise kernels on the H100 ran at 4-25%
// of the memory-bandwidth floor; a depthwise conv does ~R*S multiply-adds
// per element it reads, so it is bound by memory, not math.
//
// On the direct path an EngineConfigId names our engine and its knobs in our
// own numbering ("direct:e0:k0=2,k1=16"): engine 0 is the depthwise kernel;
// knob 0 is the output columns one thread computes (1, 2 or 4); knob 1, on
// channels-last layers only, the largest channel vector one thread loads, in
// bytes (16 or 8: half the registers, twice the threads). This file is the
// part that needs no GPU (which problems and configurations exist); the
// kernels are in direct_conv_kernel.h.
#ifndef CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_
#define CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"

namespace convserve {

inline constexpr int64_t kDirectDepthwiseEngine = 0;
inline constexpr int64_t kDirectKnobColumns = 0;
inline constexpr int64_t kDirectKnobVectorBytes = 1;
// Kernel taps (R*S) the depthwise engine keeps in shared memory per channel.
inline constexpr int64_t kDirectMaxTaps = 256;
// Elements of the input or the output the engine indexes (32-bit).
inline constexpr int64_t kDirectMaxElements = (int64_t{1} << 31) - 1;

// Whether the direct path has an engine for `problem`'s kind of layer at all
// (a 2-D depthwise conv), so the search tries the path.
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
