#include "engine/cudnn/direct_conv.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

constexpr int64_t kColumnChoices[] = {2, 1, 4};
constexpr int64_t kVectorByteChoices[] = {16, 8};
constexpr int64_t kTileChannelChoices[] = {64, 32};
constexpr int64_t kSplitChoices[] = {1, 2, 4, 8};
// The GEMM engine's configurations are listed best guess first: the one
// whose block count comes nearest this (an H100's 132 SMs).
constexpr double kGemmBlocksGuess = 132;

bool IsTwoD(const ConvLayerProblem& problem) {
  return problem.input.size() == 4 && problem.weights.size() == 4 &&
         problem.output.size() == 4;
}

bool IsDepthwise(const ConvLayerProblem& problem) {
  return IsTwoD(problem) && problem.weights[1] == 1 && problem.output[1] == problem.input[1];
}

bool IsDense(const ConvLayerProblem& problem) {
  return IsTwoD(problem) && problem.weights[1] == problem.input[1];
}

// The kernels index elements with 32-bit integers.
std::string SizeRejection(const ConvLayerProblem& problem) {
  if (NumElements(problem.input) > kDirectMaxElements ||
      NumElements(problem.weights) > kDirectMaxElements ||
      NumElements(problem.output) > kDirectMaxElements) {
    return absl::StrCat("a tensor has over ", kDirectMaxElements,
                        " elements, more than the direct engines index");
  }
  return "";
}

std::string DepthwiseRejection(const ConvLayerProblem& problem) {
  const int64_t taps = problem.weights[2] * problem.weights[3];
  if (taps > kDirectMaxTaps) {
    return absl::StrCat("the depthwise kernel has ", taps, " taps, over the direct engine's ",
                        kDirectMaxTaps);
  }
  return SizeRejection(problem);
}

std::string GemmRejection(const ConvLayerProblem& problem) {
  if (!problem.channels_last) {
    return "the direct path's implicit GEMM runs channels-last layers only";
  }
  const int64_t chunk = DirectGemmChunk(problem.dtype);
  if (problem.input[1] % chunk != 0) {
    return absl::StrCat("the direct path's implicit GEMM needs ", DTypeName(problem.dtype),
                        " input channels a multiple of ", chunk, " (have ", problem.input[1],
                        ")");
  }
  if (problem.output[1] % 8 != 0) {
    return absl::StrCat(
        "the direct path's implicit GEMM needs output channels a multiple of 8 (have ",
        problem.output[1], ")");
  }
  return SizeRejection(problem);
}

// Steps of the reduction one output channel takes.
int64_t GemmChunks(const ConvLayerProblem& problem) {
  return problem.weights[2] * problem.weights[3] * problem.input[1] /
         DirectGemmChunk(problem.dtype);
}

std::vector<EngineConfigId> GemmConfigs(const ConvLayerProblem& problem) {
  const int64_t pixels = problem.output[0] * problem.output[2] * problem.output[3];
  const int64_t pixel_tiles = (pixels + kDirectGemmTilePixels - 1) / kDirectGemmTilePixels;
  struct Ranked {
    double distance;
    EngineConfigId id;
  };
  std::vector<Ranked> ranked;
  for (int64_t channels : kTileChannelChoices) {
    const int64_t channel_tiles = (problem.output[1] + channels - 1) / channels;
    for (int64_t splits : kSplitChoices) {
      // Every block of a cluster takes at least one step of the reduction.
      if (splits > GemmChunks(problem)) break;
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectGemmEngine;
      id.knobs = {{kDirectKnobTileChannels, channels}, {kDirectKnobSplits, splits}};
      const double blocks = static_cast<double>(pixel_tiles * channel_tiles * splits);
      ranked.push_back({std::abs(std::log(blocks / kGemmBlocksGuess)), std::move(id)});
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.distance < b.distance; });
  std::vector<EngineConfigId> configs;
  for (Ranked& r : ranked) configs.push_back(std::move(r.id));
  return configs;
}

std::vector<EngineConfigId> DepthwiseConfigs(const ConvLayerProblem& problem) {
  std::vector<EngineConfigId> configs;
  for (int64_t vector_bytes : kVectorByteChoices) {
    for (int64_t columns : kColumnChoices) {
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectDepthwiseEngine;
      id.knobs = {{kDirectKnobColumns, columns}};
      if (problem.channels_last) id.knobs.emplace_back(kDirectKnobVectorBytes, vector_bytes);
      configs.push_back(std::move(id));
    }
    if (!problem.channels_last) break;
  }
  return configs;
}

}  // namespace

int64_t DirectGemmChunk(DType dtype) {
  return kDirectGemmChunkBytes / static_cast<int64_t>(DTypeSize(dtype));
}

bool DirectPathApplies(const ConvLayerProblem& problem) {
  return IsDepthwise(problem) || IsDense(problem);
}

std::string DirectConvRejection(const ConvLayerProblem& problem) {
  if (IsDepthwise(problem)) return DepthwiseRejection(problem);
  if (IsDense(problem)) return GemmRejection(problem);
  return "the direct path runs 2-D depthwise (groups == C == K) and dense (groups == 1) "
         "convolutions only";
}

std::vector<EngineConfigId> DirectConvConfigs(const ConvLayerProblem& problem) {
  if (!DirectConvRejection(problem).empty()) return {};
  return IsDepthwise(problem) ? DepthwiseConfigs(problem) : GemmConfigs(problem);
}

std::string DirectConfigRejection(const ConvLayerProblem& problem, const EngineConfigId& id) {
  if (id.path != LayerPath::kDirect) return "not a direct-path configuration";
  if (std::string why = DirectConvRejection(problem); !why.empty()) return why;
  for (const EngineConfigId& known : DirectConvConfigs(problem)) {
    if (known == id) return "";
  }
  return absl::StrCat("the direct path has no configuration ", id.ToString());
}

}  // namespace convserve
