#include "engine/cudnn/direct_conv.h"

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

constexpr int64_t kColumnChoices[] = {2, 1, 4};
constexpr int64_t kVectorByteChoices[] = {16, 8};

}  // namespace

bool DirectPathApplies(const ConvLayerProblem& problem) {
  return problem.input.size() == 4 && problem.weights.size() == 4 &&
         problem.output.size() == 4 && problem.weights[1] == 1 &&
         problem.output[1] == problem.input[1];
}

std::string DirectConvRejection(const ConvLayerProblem& problem) {
  if (!DirectPathApplies(problem)) {
    return "the direct path runs 2-D depthwise convolutions only (groups == C == K)";
  }
  const int64_t taps = problem.weights[2] * problem.weights[3];
  if (taps > kDirectMaxTaps) {
    return absl::StrCat("the depthwise kernel has ", taps, " taps, over the direct engine's ",
                        kDirectMaxTaps);
  }
  // The kernels index elements with 32-bit integers.
  if (NumElements(problem.input) > kDirectMaxElements ||
      NumElements(problem.output) > kDirectMaxElements) {
    return absl::StrCat("a tensor has over ", kDirectMaxElements,
                        " elements, more than the direct engine indexes");
  }
  return "";
}

std::vector<EngineConfigId> DirectConvConfigs(const ConvLayerProblem& problem) {
  std::vector<EngineConfigId> configs;
  if (!DirectConvRejection(problem).empty()) return configs;
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

std::string DirectConfigRejection(const ConvLayerProblem& problem, const EngineConfigId& id) {
  if (id.path != LayerPath::kDirect) return "not a direct-path configuration";
  if (std::string why = DirectConvRejection(problem); !why.empty()) return why;
  for (const EngineConfigId& known : DirectConvConfigs(problem)) {
    if (known == id) return "";
  }
  return absl::StrCat("the direct path has no configuration ", id.ToString());
}

}  // namespace convserve
