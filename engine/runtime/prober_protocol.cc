#include "engine/runtime/prober_protocol.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace convserve {

std::vector<std::string> ProberArguments(const ProberLaunch& launch) {
  const EngineSelection& s = launch.selection;
  std::vector<int64_t> blocked(s.blocklist.begin(), s.blocklist.end());
  std::sort(blocked.begin(), blocked.end());
  return {
      absl::StrCat("--device=", launch.device),
      absl::StrCat("--engine_selection=", EngineSearchName(s.search)),
      absl::StrCat("--deterministic=", s.deterministic_only ? "true" : "false"),
      absl::StrCat("--strict_float32=", s.strict_float32 ? "true" : "false"),
      absl::StrCat("--direct_kernels=", s.direct_kernels ? "true" : "false"),
      absl::StrCat("--max_workspace_bytes=", s.max_workspace_bytes),
      absl::StrCat("--autotune_candidates=", s.autotune_candidates),
      absl::StrCat("--autotune_iterations=", s.autotune_iterations),
      absl::StrCat("--autotune_knob_candidates=", s.autotune_knob_candidates),
      absl::StrCat("--engine_blocklist_ids=", absl::StrJoin(blocked, ",")),
      absl::StrCat("--cudnn_errata=", launch.errata_file),
      absl::StrCat("--plan_cache_dir=", launch.store_directory),
      absl::StrCat("--testing_fault_candidate_rank=", launch.testing_fault_rank),
      absl::StrCat("--log_level=", launch.log_level),
      absl::StrCat("--dependent_launch=", launch.dependent_launch ? "true" : "false"),
      absl::StrCat("--programmatic_entry=", launch.programmatic_entry ? "true" : "false"),
  };
}

std::string QuarantineKey(const std::string& target_key, const ConvLayerProblem& problem,
                          const EngineConfigId& id) {
  return absl::StrCat(target_key, "|", problem.Encode(), "|", id.ToString());
}

std::string EscapeLine(absl::string_view text) { return absl::CEscape(text); }

std::string UnescapeLine(absl::string_view text) {
  std::string out;
  if (!absl::CUnescape(text, &out)) return std::string(text);
  return out;
}

std::string FormatResultLine(const CandidateResult& result) {
  return absl::StrFormat("RESULT %s %s %.9g %d %s", result.id.ToString(),
                         result.ok ? "ok" : "rejected", result.ms, result.workspace_bytes,
                         EscapeLine(result.detail));
}

absl::StatusOr<CandidateResult> ParseResultLine(absl::string_view line) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(' ', 5));
  if (fields.size() < 5 || fields[0] != "RESULT" ||
      (fields[2] != "ok" && fields[2] != "rejected")) {
    return absl::InvalidArgumentError(absl::StrCat("malformed prober line '", line, "'"));
  }
  CandidateResult result;
  absl::StatusOr<EngineConfigId> id = EngineConfigId::Parse(fields[1]);
  if (!id.ok()) return id.status();
  result.id = *id;
  result.ok = fields[2] == "ok";
  if (!absl::SimpleAtof(fields[3], &result.ms) ||
      !absl::SimpleAtoi(fields[4], &result.workspace_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed prober line '", line, "'"));
  }
  if (fields.size() == 6) result.detail = UnescapeLine(fields[5]);
  return result;
}

}  // namespace convserve
