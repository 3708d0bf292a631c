// The engine configurations cuDNN offers for one layer on one path, best
// first, after the selection's filters and the errata; and the rebuilding of
// one configuration from its EngineConfigId, with no heuristics query, for
// a plan chosen elsewhere (another worker, the prober process, a restart).
#ifndef CONVSERVE_ENGINE_CUDNN_ENGINE_CANDIDATES_H_
#define CONVSERVE_ENGINE_CUDNN_ENGINE_CANDIDATES_H_

#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/backend_descriptor.h"
#include "engine/cudnn/conv_operation_graph.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/cudnn/engine_selection.h"

namespace convserve {

// One finalized engine configuration and the descriptors it owns.
struct EngineCandidate {
  EngineConfigId id;
  // The engine and knob-choice descriptors a rebuilt config refers to
  // (declared first: destroyed after the config).
  std::vector<BackendDescriptor> parts;
  // CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, finalized.
  BackendDescriptor config;
  // cuDNN compiles this engine's kernel at plan finalization (NVRTC).
  bool runtime_compiled = false;
};

struct CandidateSet {
  std::shared_ptr<const ConvOperationGraph> graph;
  // Best first: heuristic modes in the selection's order, duplicates dropped.
  std::vector<EngineCandidate> candidates;
  // "<id>: why" for each configuration the filters or the errata removed.
  std::vector<std::string> skipped;
};

absl::StatusOr<CandidateSet> FindEngineCandidates(cudnnHandle_t handle,
                                                  const ConvLayerProblem& problem, LayerPath path,
                                                  const EngineSelection& selection,
                                                  const CudnnTarget& target);

// Autotune's knob search: configurations of `center`'s engine that differ
// from `center` in one knob's setting. Every knob cuDNN lists for the engine
// on this graph (CUDNN_ATTR_ENGINE_KNOB_INFO) but those the header marks
// deprecated; a knob `center` leaves unset is set. Its legal values nearest the
// centre's first (at most kKnobValuesPerSide each side), taken in turn
// across the knobs so a small `max` still moves each knob; none in
// `exclude`, none the selection's filters or the errata reject (listed in
// `skipped`), none cuDNN refuses to build. At most `max`; heuristics offer a
// few settings of an engine, and a faster one for the layer is often a
// neighbour of the best they offer.
inline constexpr int kKnobValuesPerSide = 3;

// One knob's range as cuDNN lists it for an engine (CUDNN_ATTR_KNOB_INFO_*):
// the values min, min + stride, ... up to max.
struct KnobRange {
  int64_t type = 0;
  int64_t min = 0;
  int64_t max = 0;
  int64_t stride = 1;
};
// `knob`'s legal values other than `current`, nearest first: `current`
// snapped onto the grid when it lies off it, then one step below, one above,
// two below, ..., at most kKnobValuesPerSide each side.
std::vector<int64_t> NearestKnobValues(const KnobRange& knob, int64_t current);
absl::StatusOr<CandidateSet> FindKnobNeighbours(std::shared_ptr<const ConvOperationGraph> graph,
                                                const ConvLayerProblem& problem,
                                                const EngineConfigId& center,
                                                const std::vector<EngineConfigId>& exclude,
                                                int max, const EngineSelection& selection,
                                                const CudnnTarget& target);

// The configuration `id` on `graph`, rebuilt from the engine's global index
// and the knob settings. An error when cuDNN does not support it there.
absl::StatusOr<EngineCandidate> RebuildEngineCandidate(const ConvOperationGraph& graph,
                                                       const EngineConfigId& id);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_ENGINE_CANDIDATES_H_
