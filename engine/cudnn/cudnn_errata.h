// Known-bad cuDNN engine configurations, skipped before any of them runs
// (the role cudnn-frontend's errata filter plays for its users). Rules come
// from the list shipped in the binary (engine/cudnn/cudnn_errata.txt) and an
// optional operator file; each names an engine (and optionally knob
// settings), the cuDNN versions and GPUs it applies to, and conditions on
// the layer. Plain data and parsing, no cuDNN calls. Immutable after Create;
// thread-safe.
#ifndef CONVSERVE_ENGINE_CUDNN_CUDNN_ERRATA_H_
#define CONVSERVE_ENGINE_CUDNN_CUDNN_ERRATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/engine_config_id.h"

namespace convserve {

// An inclusive range of integers; both ends open when unset.
struct IntRange {
  std::optional<int64_t> low, high;
  bool Contains(int64_t value) const {
    return (!low.has_value() || value >= *low) && (!high.has_value() || value <= *high);
  }
};

struct ErrataRule {
  // Short name, shown when the rule skips a candidate.
  std::string name;
  // Why it exists (the defect seen), shown in logs.
  std::string reason;
  // cuDNN runtime version as major*10000 + minor*100 + patch.
  IntRange cudnn;
  // Compute capability as major*10 + minor.
  IntRange compute_capability;
  // Engine global index; unset matches every engine.
  std::optional<int64_t> engine;
  // Knob settings that must all be present; empty matches any setting.
  std::vector<std::pair<int64_t, int64_t>> knobs;
  std::optional<LayerPath> path;
  std::optional<DType> dtype;
  std::optional<bool> channels_last;
  std::optional<int64_t> spatial_rank;
  IntRange out_channels, in_channels, groups, batch;
  std::optional<bool> depthwise, strided, dilated, bias;

  bool Matches(int cudnn_version, int compute_capability, const ConvLayerProblem& problem,
               const EngineConfigId& id) const;
};

class CudnnErrata {
 public:
  // The shipped rules plus those in `extra_file` (empty for none).
  // INVALID_ARGUMENT names the file and line of a malformed rule.
  static absl::StatusOr<std::shared_ptr<const CudnnErrata>> Create(const std::string& extra_file);
  // Rules from text in the errata format (see cudnn_errata.txt); `source`
  // names it in errors.
  static absl::StatusOr<std::vector<ErrataRule>> ParseRules(absl::string_view text,
                                                            absl::string_view source);

  // The first rule that matches, or null.
  const ErrataRule* Find(int cudnn_version, int compute_capability,
                         const ConvLayerProblem& problem, const EngineConfigId& id) const;
  size_t size() const { return rules_.size(); }

 private:
  explicit CudnnErrata(std::vector<ErrataRule> rules) : rules_(std::move(rules)) {}

  const std::vector<ErrataRule> rules_;
};

// The text of engine/cudnn/cudnn_errata.txt, compiled in.
extern const char* const kShippedCudnnErrata;

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CUDNN_ERRATA_H_
