#include "engine/runtime/engine_choice_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/prober_protocol.h"
#include "spdlog/spdlog.h"

namespace convserve {

std::string EngineChoiceKey(const CudnnTarget& target, int cuda_runtime_version,
                            const std::string& policy, const ConvLayerProblem& problem) {
  return absl::StrCat(target.Key(), "/cuda", cuda_runtime_version, "/", policy, "/",
                      problem.Encode());
}

// Format: "best_ms <float>" then one configuration per line, best first.
std::string EncodeEngineChoice(const EngineChoice& choice) {
  std::string text = absl::StrCat("best_ms ", choice.best_ms, "\n");
  for (const EngineConfigId& id : choice.ranked) absl::StrAppend(&text, id.ToString(), "\n");
  return text;
}

absl::StatusOr<EngineChoice> DecodeEngineChoice(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  EngineChoice choice;
  if (lines.empty() || !absl::ConsumePrefix(&lines[0], "best_ms ") ||
      !absl::SimpleAtof(lines[0], &choice.best_ms) || choice.best_ms < 0) {
    return absl::InvalidArgumentError("an engine choice record starts with 'best_ms <ms>'");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(lines[i]);
    if (!id.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine choice record line ", i + 1, ": ", id.status().message()));
    }
    choice.ranked.push_back(*std::move(id));
  }
  if (choice.ranked.empty()) {
    return absl::InvalidArgumentError("an engine choice record names no configuration");
  }
  return choice;
}

EngineChoiceStore::EngineChoiceStore(PlanStore* store, CudnnTarget target,
                                     int cuda_runtime_version, std::string policy,
                                     const EngineSelection* selection)
    : store_(store),
      target_(std::move(target)),
      cuda_runtime_version_(cuda_runtime_version),
      policy_(std::move(policy)),
      selection_(selection) {}

std::string EngineChoiceStore::Disallowed(const ConvLayerProblem& problem,
                                          const EngineConfigId& id) const {
  std::string rejection = ConfigRejection(*selection_, target_, problem, id);
  if (!rejection.empty()) return rejection;
  if (store_->Get("quarantine", QuarantineKey(target_.Key(), problem, id)).has_value()) {
    return "quarantined";
  }
  return "";
}

std::optional<EngineChoice> EngineChoiceStore::Load(const ConvLayerProblem& problem,
                                                    std::vector<std::string>* dropped) const {
  const std::string key = EngineChoiceKey(target_, cuda_runtime_version_, policy_, problem);
  std::optional<std::string> record = store_->Get(kEngineChoiceKind, key);
  if (!record.has_value()) return std::nullopt;
  absl::StatusOr<EngineChoice> stored = DecodeEngineChoice(*record);
  if (!stored.ok()) {
    spdlog::warn("plan store: ignoring the engine choice for {}: {}", problem.Describe(),
                 std::string(stored.status().message()));
    return std::nullopt;
  }
  EngineChoice choice;
  for (size_t i = 0; i < stored->ranked.size(); ++i) {
    const EngineConfigId& id = stored->ranked[i];
    const std::string reason = Disallowed(problem, id);
    if (!reason.empty()) {
      dropped->push_back(absl::StrCat(id.ToString(), ": ", reason));
      continue;
    }
    // The timing belongs to the stored best only.
    if (choice.ranked.empty() && i == 0) choice.best_ms = stored->best_ms;
    choice.ranked.push_back(id);
  }
  if (choice.ranked.empty()) return std::nullopt;
  return choice;
}

absl::Status EngineChoiceStore::Save(const ConvLayerProblem& problem,
                                     const EngineChoice& choice) const {
  return store_->Put(kEngineChoiceKind,
                     EngineChoiceKey(target_, cuda_runtime_version_, policy_, problem),
                     EncodeEngineChoice(choice));
}

}  // namespace convserve
