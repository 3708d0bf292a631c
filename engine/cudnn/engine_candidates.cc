#include "engine/cudnn/engine_candidates.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

// More than any cuDNN 9 release defines (44 knob types in 9.19).
constexpr int64_t kMaxKnobs = 64;

// `count` new descriptors of `type` and their handles, for a
// cudnnBackendGetAttribute that fills an array of descriptors.
struct DescriptorArray {
  std::vector<BackendDescriptor> owned;
  std::vector<cudnnBackendDescriptor_t> raw;
};
absl::StatusOr<DescriptorArray> MakeDescriptors(cudnnBackendDescriptorType_t type,
                                                int64_t count) {
  DescriptorArray array;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(BackendDescriptor descriptor, BackendDescriptor::Create(type));
    array.raw.push_back(descriptor.get());
    array.owned.push_back(std::move(descriptor));
  }
  return array;
}

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
  ASSIGN_OR_RETURN(DescriptorArray configs,
                   MakeDescriptors(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count));
  int64_t returned = 0;
  if (count > 0) {
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                                   &returned, configs.raw.data()));
  }
  configs.owned.resize(std::min<int64_t>(returned, count));
  return std::move(configs.owned);
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

  ASSIGN_OR_RETURN(DescriptorArray choices,
                   MakeDescriptors(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, kMaxKnobs));
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, &count,
                                                 choices.raw.data()));
  for (int64_t i = 0; i < std::min(count, kMaxKnobs); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0, n = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(choices.raw[i],
                                                   CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                                   CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        choices.raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n, &value));
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

// Knob types cuDNN's header marks deprecated (split-K, texture loads, ...):
// left as the heuristics set them. The texture knob's other setting made a
// float32 stem plan that ran but could not be captured into a CUDA graph
// (H100, cuDNN 9.14).
bool DeprecatedKnob(int64_t type) {
  switch (type) {
    // SPLIT_K, USE_TEX, KBLOCK, LDGA, LDGB, CHUNK_K, SPLIT_H, WINO_TILE,
    // CTA_SPLIT_K_MODE, SLICED, SPLIT_RS, SINGLEBUFFER, LDGC, TILE_CGA,
    // NUM_C_PER_BLOCK (named by number: the names warn as deprecated).
    case 0: case 3: case 5: case 6: case 7: case 8: case 9: case 10: case 16: case 19:
    case 20: case 21: case 22: case 26: case 32:
      return true;
    default:
      return false;
  }
}


// The knobs cuDNN lists for `engine_index` on `graph`.
absl::StatusOr<std::vector<KnobRange>> EngineKnobs(const ConvOperationGraph& graph,
                                                   int64_t engine_index) {
  ASSIGN_OR_RETURN(BackendDescriptor engine,
                   BackendDescriptor::Create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  RETURN_IF_ERROR(engine.SetDescriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph.graph));
  RETURN_IF_ERROR(engine.SetInt64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, engine_index));
  RETURN_IF_ERROR(engine.Finalize());
  ASSIGN_OR_RETURN(DescriptorArray infos,
                   MakeDescriptors(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, kMaxKnobs));
  int64_t count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_KNOB_INFO,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs,
                                                 &count, infos.raw.data()));
  std::vector<KnobRange> knobs;
  for (int64_t i = 0; i < std::min(count, kMaxKnobs); ++i) {
    KnobRange knob;
    cudnnBackendKnobType_t type;
    int64_t n = 0;
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(infos.raw[i], CUDNN_ATTR_KNOB_INFO_TYPE,
                                                   CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    knob.type = static_cast<int64_t>(type);
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        infos.raw[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &knob.min));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        infos.raw[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &knob.max));
    CUDNN_RETURN_IF_ERROR(cudnnBackendGetAttribute(
        infos.raw[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &n, &knob.stride));
    if (knob.stride < 1) knob.stride = 1;
    if (knob.max > knob.min && !DeprecatedKnob(knob.type)) knobs.push_back(knob);
  }
  return knobs;
}

}  // namespace

// Offsets from the minimum are unsigned: a range may span most of int64.
std::vector<int64_t> NearestKnobValues(const KnobRange& knob, int64_t current) {
  const uint64_t stride = static_cast<uint64_t>(knob.stride);
  const auto offset = [&](int64_t value) {
    return static_cast<uint64_t>(value) - static_cast<uint64_t>(knob.min);
  };
  const auto value_at = [&](uint64_t step) {
    return static_cast<int64_t>(static_cast<uint64_t>(knob.min) + step * stride);
  };
  // The centre snapped onto the knob's grid.
  const uint64_t steps = offset(std::clamp(current, knob.min, knob.max)) / stride;
  const uint64_t last = offset(knob.max) / stride;
  std::vector<int64_t> values;
  if (value_at(steps) != current) values.push_back(value_at(steps));
  for (uint64_t d = 1; d <= static_cast<uint64_t>(kKnobValuesPerSide); ++d) {
    if (steps >= d) values.push_back(value_at(steps - d));
    if (last - steps >= d) values.push_back(value_at(steps + d));
  }
  return values;
}

absl::StatusOr<CandidateSet> FindKnobNeighbours(std::shared_ptr<const ConvOperationGraph> graph,
                                                const ConvLayerProblem& problem,
                                                const EngineConfigId& center,
                                                const std::vector<EngineConfigId>& exclude,
                                                int max, const EngineSelection& selection,
                                                const CudnnTarget& target) {
  CandidateSet set;
  set.graph = std::move(graph);
  ASSIGN_OR_RETURN(std::vector<KnobRange> knobs, EngineKnobs(*set.graph, center.engine));
  // Per knob, the configurations moving it, nearest value first.
  std::vector<std::vector<EngineConfigId>> moves;
  for (const KnobRange& knob : knobs) {
    const auto it = std::find_if(center.knobs.begin(), center.knobs.end(),
                                 [&](const auto& k) { return k.first == knob.type; });
    const int64_t current = it != center.knobs.end() ? it->second : knob.min;
    std::vector<EngineConfigId>& ids = moves.emplace_back();
    for (int64_t value : NearestKnobValues(knob, current)) {
      EngineConfigId id = center;
      if (it != center.knobs.end()) {
        id.knobs[it - center.knobs.begin()].second = value;
      } else {
        id.knobs.emplace_back(knob.type, value);
        std::sort(id.knobs.begin(), id.knobs.end());
      }
      ids.push_back(std::move(id));
    }
  }
  for (size_t rank = 0; static_cast<int>(set.candidates.size()) < max; ++rank) {
    bool any = false;
    for (const std::vector<EngineConfigId>& ids : moves) {
      if (rank >= ids.size() || static_cast<int>(set.candidates.size()) >= max) continue;
      any = true;
      const EngineConfigId& id = ids[rank];
      if (std::find(exclude.begin(), exclude.end(), id) != exclude.end()) continue;
      absl::StatusOr<EngineCandidate> candidate = RebuildEngineCandidate(*set.graph, id);
      if (!candidate.ok()) continue;  // cuDNN does not build this setting here
      absl::StatusOr<EngineInfo> info = DescribeConfig(candidate->config, id.path);
      if (!info.ok()) continue;
      const std::string why = Rejection(*info, problem, selection, target);
      if (!why.empty()) {
        set.skipped.push_back(absl::StrCat(id.ToString(), ": ", why));
        continue;
      }
      candidate->runtime_compiled = info->runtime_compiled;
      set.candidates.push_back(*std::move(candidate));
    }
    if (!any) break;
  }
  return set;
}

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
