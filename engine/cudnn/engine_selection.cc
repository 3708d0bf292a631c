#include "engine/cudnn/engine_selection.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/cudnn/direct_conv.h"

namespace convserve {

std::string CudnnTarget::Key() const {
  return absl::StrCat(device_name, "/sm", compute_capability, "/cudnn", cudnn_version);
}

namespace {

// What the direct path's tensor-core engines need of the GPU and the
// selection (the depthwise engine runs everywhere, in float32).
struct DirectEngineNeeds {
  int64_t engine;
  const char* name;
  const char* feature;
  int capability;  // major * 10 + minor
  bool tf32;       // float32 is multiplied in TF32
};
constexpr DirectEngineNeeds kDirectEngineNeeds[] = {
    {kDirectGemmEngine, "the implicit GEMM", "thread-block clusters",
     kDirectGemmComputeCapability, true},
    {kDirectNarrowEngine, "the narrow GEMM", "mma.sync", kDirectNarrowComputeCapability, true},
    {kDirectPointwiseEngine, "the pointwise GEMM", "mma.sync", kDirectPointwiseComputeCapability,
     true},
    {kDirectHaloEngine, "the halo GEMM", "mma.sync", kDirectHaloComputeCapability, true},
};

const DirectEngineNeeds* DirectNeedsOf(const EngineConfigId& id) {
  if (id.path != LayerPath::kDirect) return nullptr;
  for (const DirectEngineNeeds& needs : kDirectEngineNeeds) {
    if (needs.engine == id.engine) return &needs;
  }
  return nullptr;
}

}  // namespace

std::string ConfigRejection(const EngineSelection& selection, const CudnnTarget& target,
                            const ConvLayerProblem& problem, const EngineConfigId& id) {
  if (id.path == LayerPath::kDirect && !selection.direct_kernels) {
    return "convserve's own kernels are off (--direct_kernels=false)";
  }
  if (const DirectEngineNeeds* needs = DirectNeedsOf(id); needs != nullptr) {
    if (target.compute_capability > 0 && target.compute_capability < needs->capability) {
      return absl::StrCat(needs->name, " needs ", needs->feature, " (compute capability ",
                          needs->capability / 10, ".", needs->capability % 10, "; this GPU has ",
                          target.compute_capability / 10, ".", target.compute_capability % 10,
                          ")");
    }
    if (id.engine == kDirectHaloEngine && DirectKnob(id, kDirectKnobTapSplit) > 1 &&
        target.compute_capability > 0 &&
        target.compute_capability < kDirectGemmComputeCapability) {
      return absl::StrCat("the halo GEMM's split taps need thread-block clusters (compute "
                          "capability 9.0; this GPU has ",
                          target.compute_capability / 10, ".", target.compute_capability % 10,
                          ")");
    }
    if (needs->tf32 && problem.dtype == DType::kFloat32 && selection.strict_float32) {
      return absl::StrCat(needs->name, " multiplies float32 in TF32 (--strict_float32)");
    }
  }
  if (id.path != LayerPath::kDirect && selection.blocklist.contains(id.engine)) {
    return "blocklisted (--engine_blocklist)";
  }
  if (selection.errata != nullptr) {
    const ErrataRule* rule =
        selection.errata->Find(target.cudnn_version, target.compute_capability, problem, id);
    if (rule != nullptr) return absl::StrCat("errata rule '", rule->name, "': ", rule->reason);
  }
  return "";
}

bool AutotuneAlsoTries(const ConvLayerProblem& problem, LayerPath path) {
  return path != LayerPath::kUnfusedRounding || problem.dtype == DType::kFloat16;
}

float AutotuneRankMs(float ms, LayerPath path) {
  return path == LayerPath::kUnfusedRounding ? ms * kRoundingSpeedup : ms;
}

absl::StatusOr<EngineSearch> ParseEngineSearch(const std::string& name) {
  if (name == "heuristic" || name == "heuristic_a") return EngineSearch::kHeuristicInstant;
  if (name == "heuristic_b") return EngineSearch::kHeuristicB;
  if (name == "fallback") return EngineSearch::kFallback;
  if (name == "autotune") return EngineSearch::kAutotune;
  return absl::InvalidArgumentError(absl::StrCat(
      "engine selection '", name, "' is not one of heuristic, heuristic_b, fallback, autotune"));
}

const char* EngineSearchName(EngineSearch search) {
  switch (search) {
    case EngineSearch::kHeuristicInstant:
      return "heuristic";
    case EngineSearch::kHeuristicB:
      return "heuristic_b";
    case EngineSearch::kFallback:
      return "fallback";
    case EngineSearch::kAutotune:
      return "autotune";
  }
  return "unknown";
}

absl::StatusOr<absl::flat_hash_set<int64_t>> ReadEngineBlocklist(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open engine blocklist '", path, "'"));
  absl::flat_hash_set<int64_t> blocked;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    absl::string_view text = line;
    const size_t comment = text.find('#');
    if (comment != absl::string_view::npos) text = text.substr(0, comment);
    text = absl::StripAsciiWhitespace(text);
    if (text.empty()) continue;
    int64_t index;
    if (!absl::SimpleAtoi(text, &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": '", text,
                                                     "' is not an engine index"));
    }
    blocked.insert(index);
  }
  return blocked;
}

}  // namespace convserve
