#include "engine/cudnn/engine_candidates.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

// More than any cuDNN 9 release defines (44 knob types in 9.19).
constexpr int64_t kMaxKnobs = 64;

// Engine configs from one heuristics mode, best first.
absl::StatusOr<std::vector<BackendDescriptor>> QueryHeuristics(const BackendDescriptor& graph,
                                                               cudnnBackendHeurMode_t mode) {
  ASSIGN_OR_RETURN(BackendDescriptor heur,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  RETURN_IF_ERROR(heur.SetDescriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  RETURN_IF_ERROR(heur.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  RETURN_IF_ERROR(heur.Finalize());
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                                 nullptr));
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(BackendDescriptor config,
                     BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(config.get());
    configs.push_back(std::move(config));
  }
  int64_t returned = 0;
  if (count > 0) {
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                   &returned, raw.data()));
  }
  configs.resize(std::min<int64_t>(returned, count));
  return configs;
}

struct EngineInfo {
  EngineConfigId id;
  std::vector<cudnnBackendNumericalNote_t> numerical_notes;
  bool runtime_compiled = false;
};

// Engine index, knob settings and notes of a heuristics result.
absl::StatusOr<EngineInfo> DescribeConfig(const BackendDescriptor& config, LayerPath path) {
  ASSIGN_OR_RETURN(BackendDescriptor engine,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &raw));
  EngineInfo info;
  info.id.path = path;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                                 CUDNN_TYPE_INT64, 1, &count, &info.id.engine));
  info.numerical_notes.resize(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
      engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
      static_cast<int64_t>(info.numerical_notes.size()), &count, info.numerical_notes.data()));
  info.numerical_notes.resize(count);
  std::vector<cudnnBackendBehaviorNote_t> behavior(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
      engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
      static_cast<int64_t>(behavior.size()), &count, behavior.data()));
  behavior.resize(count);
  info.runtime_compiled = std::find(behavior.begin(), behavior.end(),
                                    CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != behavior.end();

  std::vector<BackendDescriptor> choices;
  std::vector<cudnnBackendDescriptor_t> raw_choices;
  for (int64_t i = 0; i < kMaxKnobs; ++i) {
    ASSIGN_OR_RETURN(BackendDescriptor choice,
                     BackendDescriptor::Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    raw_choices.push_back(choice.get());
    choices.push_back(std::move(choice));
  }
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, &count,
                                                 raw_choices.data()));
  for (int64_t i = 0; i < std::min(count, kMaxKnobs); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, n = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(choices[i].get(),
                                                   CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                                   CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        choices[i].get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value));
    info.id.knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  std::sort(info.id.knobs.begin(), info.id.knobs.end());
  return info;
}

bool HasNote(const EngineInfo& info, cudnnBackendNumericalNote_t note) {
  return std::find(info.numerical_notes.begin(), info.numerical_notes.end(), note) !=
         info.numerical_notes.end();
}

// Why `info` may not run under `selection`, or "" when it may.
std::string Rejection(const EngineInfo& info, const ConvLayerProblem& problem,
                      const EngineSelection& selection, const CudnnTarget& target) {
  std::string rejection = ConfigRejection(selection, target, problem, info.id);
  if (!rejection.empty()) return rejection;
  if (selection.deterministic_only && HasNote(info, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) {
    return "non-deterministic (--deterministic)";
  }
  if (problem.dtype == DType::kFloat32 && selection.strict_float32 &&
      (HasNote(info, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
       HasNote(info, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))) {
    return "uses TF32 or down-converts (--strict_float32)";
  }
  return "";
}

std::vector<cudnnBackendHeurMode_t> HeuristicModes(EngineSearch search) {
  switch (search) {
    case EngineSearch::kHeuristicInstant:
      return {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_FALLBACK};
    case EngineSearch::kAutotune:
      // Both heuristic modes rank differently; timing decides among their tops.
      return {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
    case EngineSearch::kHeuristicB:
      return {CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
    case EngineSearch::kFallback:
      return {CUDNN_HEUR_MODE_FALLBACK};
  }
  return {CUDNN_HEUR_MODE_FALLBACK};
}

}  // namespace

absl::StatusOr<CandidateSet> FindEngineCandidates(cudnnHandle_t handle,
                                                  const ConvLayerProblem& problem, LayerPath path,
                                                  const EngineSelection& selection,
                                                  const CudnnTarget& target) {
  CandidateSet set;
  ASSIGN_OR_RETURN(set.graph, BuildConvOperationGraph(handle, problem, path));
  std::string last_error;
  for (cudnnBackendHeurMode_t mode : HeuristicModes(selection.search)) {
    absl::StatusOr<std::vector<BackendDescriptor>> configs = QueryHeuristics(set.graph->graph, mode);
    if (!configs.ok()) {
      last_error = std::string(configs.status().message());
      continue;
    }
    for (BackendDescriptor& config : *configs) {
      absl::StatusOr<EngineInfo> info = DescribeConfig(config, path);
      if (!info.ok()) {
        last_error = std::string(info.status().message());
        continue;
      }
      const auto same = [&](const EngineCandidate& c) { return c.id == info->id; };
      if (std::any_of(set.candidates.begin(), set.candidates.end(), same)) continue;
      const std::string why = Rejection(*info, problem, selection, target);
      if (!why.empty()) {
        set.skipped.push_back(absl::StrCat(info->id.ToString(), ": ", why));
        continue;
      }
      EngineCandidate candidate;
      candidate.id = info->id;
      candidate.config = std::move(config);
      candidate.runtime_compiled = info->runtime_compiled;
      set.candidates.push_back(std::move(candidate));
    }
  }
  if (set.candidates.empty() && set.skipped.empty() && !last_error.empty()) {
    return absl::UnimplementedError(absl::StrCat("cuDNN heuristics offer no engine for the ",
                                                 LayerPathName(path), " path: ", last_error));
  }
  return set;
}

absl::StatusOr<EngineCandidate> RebuildEngineCandidate(const ConvOperationGraph& graph,
                                                       const EngineConfigId& id) {
  EngineCandidate candidate;
  candidate.id = id;
  ASSIGN_OR_RETURN(BackendDescriptor engine,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  RETURN_IF_ERROR(engine.SetDescriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph.graph));
  RETURN_IF_ERROR(engine.SetInt64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, id.engine));
  RETURN_IF_ERROR(engine.Finalize());
  std::vector<cudnnBackendDescriptor_t> raw_choices;
  for (const auto& [type, value] : id.knobs) {
    ASSIGN_OR_RETURN(BackendDescriptor choice,
                     BackendDescriptor::Create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    const cudnnBackendKnobType_t knob = static_cast<cudnnBackendKnobType_t>(type);
    RETURN_IF_ERROR(choice.Set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knob));
    RETURN_IF_ERROR(choice.SetInt64(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, value));
    RETURN_IF_ERROR(choice.Finalize());
    raw_choices.push_back(choice.get());
    candidate.parts.push_back(std::move(choice));
  }
  ASSIGN_OR_RETURN(candidate.config,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  RETURN_IF_ERROR(candidate.config.SetDescriptor(CUDNN_ATTR_ENGINECFG_ENGINE, engine));
  if (!raw_choices.empty()) {
    RETURN_IF_ERROR(candidate.config.SetDescriptors(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, raw_choices));
  }
  RETURN_IF_ERROR(candidate.config.Finalize());
  candidate.parts.push_back(std::move(engine));
  return candidate;
}

}  // namespace convserve
