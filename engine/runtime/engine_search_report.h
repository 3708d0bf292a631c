// What one engine search found for one layer: every candidate considered,
// whether it passed, how fast it ran. The search (engine/cudnn/
// candidate_search.h) fills it in the prober process or in-process; the
// runtime picks from it. Plain data.
#ifndef CONVSERVE_ENGINE_RUNTIME_ENGINE_SEARCH_REPORT_H_
#define CONVSERVE_ENGINE_RUNTIME_ENGINE_SEARCH_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/cudnn/engine_config_id.h"

namespace convserve {

struct CandidateResult {
  EngineConfigId id;
  // Ran, wrote every output finitely and nothing outside its buffers.
  bool ok = false;
  // Median milliseconds per run when timed (autotune), else 0.
  float ms = 0;
  // Device scratch it needs (cuDNN workspace and float32 scratch).
  int64_t workspace_bytes = 0;
  // Why it was rejected (or not run, e.g. "quarantined: ..."); empty if ok.
  std::string detail;
};

struct SearchReport {
  // Candidates were timed: Ranked() orders by speed.
  bool timed = false;
  // In the order considered.
  std::vector<CandidateResult> results;
  // "<id>: why" for configurations filtered out before running (selection
  // filters, errata) and paths that had no candidates.
  std::vector<std::string> skipped;
  // The search's winner, when it named one: autotune's final timing can put
  // a finalist above a candidate that timed faster once, in its first pass.
  std::optional<EngineConfigId> chosen;

  // Passing candidates, best first: `chosen` when set, then the fastest
  // (AutotuneRankMs) when timed, else in order.
  std::vector<EngineConfigId> Ranked() const;
  // Candidates that faulted, were quarantined or rejected, for errors.
  std::string Summary() const;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_ENGINE_SEARCH_REPORT_H_
