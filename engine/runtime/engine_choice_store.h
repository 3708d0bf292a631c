// Engine choices kept in the plan store ("choice" records): what a layer
// problem's search decided on one GPU model, so a restart, or another
// replica on the same volume, builds the chosen plan without searching
// again. Keyed by the GPU model and compute capability, the cuDNN and CUDA
// runtime versions, the selection policy and the problem. A stored choice
// is re-checked against today's verdicts before use: configurations
// quarantined since, matched by an errata rule or blocklisted are dropped.
#ifndef CONVSERVE_ENGINE_RUNTIME_ENGINE_CHOICE_STORE_H_
#define CONVSERVE_ENGINE_RUNTIME_ENGINE_CHOICE_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/runtime/plan_store.h"

namespace convserve {

// What an engine search decided for one layer problem on one GPU model.
struct EngineChoice {
  // Configurations that passed, best first (the fastest, when autotuned).
  std::vector<EngineConfigId> ranked;
  // Median ms of ranked[0] when timed, else 0.
  float best_ms = 0;
};

// The plan store kind of engine choices.
inline constexpr char kEngineChoiceKind[] = "choice";

// The record key: "<target key>/cuda<version>/<policy>/<problem>".
std::string EngineChoiceKey(const CudnnTarget& target, int cuda_runtime_version,
                            const std::string& policy, const ConvLayerProblem& problem);

// Record body <-> choice. Decode: INVALID_ARGUMENT on anything Encode does
// not write, or a choice with no configuration.
std::string EncodeEngineChoice(const EngineChoice& choice);
absl::StatusOr<EngineChoice> DecodeEngineChoice(absl::string_view text);

// Reads and re-checks stored choices for one GPU model, policy and library.
class EngineChoiceStore {
 public:
  // `store` and `selection` outlive this.
  EngineChoiceStore(PlanStore* store, CudnnTarget target, int cuda_runtime_version,
                    std::string policy, const EngineSelection* selection);

  // The stored choice for `problem` with the configurations no longer
  // allowed removed (each named in `dropped` with its reason); nullopt when
  // there is no valid record or nothing of it is left.
  std::optional<EngineChoice> Load(const ConvLayerProblem& problem,
                                   std::vector<std::string>* dropped) const;
  absl::Status Save(const ConvLayerProblem& problem, const EngineChoice& choice) const;

 private:
  // Why `id` may not run `problem` today, or empty.
  std::string Disallowed(const ConvLayerProblem& problem, const EngineConfigId& id) const;

  PlanStore* const store_;
  const CudnnTarget target_;
  const int cuda_runtime_version_;
  const std::string policy_;
  const EngineSelection* const selection_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_ENGINE_CHOICE_STORE_H_
