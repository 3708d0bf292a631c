#include "engine/runtime/engine_search_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/engine_selection.h"

namespace convserve {

std::vector<EngineConfigId> SearchReport::Ranked() const {
  std::vector<const CandidateResult*> passed;
  for (const CandidateResult& r : results) {
    if (r.ok) passed.push_back(&r);
  }
  if (timed) {
    std::stable_sort(passed.begin(), passed.end(),
                     [](const CandidateResult* a, const CandidateResult* b) {
                       return AutotuneRankMs(a->ms, a->id.path) < AutotuneRankMs(b->ms, b->id.path);
                     });
  }
  std::vector<EngineConfigId> ids;
  for (const CandidateResult* r : passed) ids.push_back(r->id);
  if (chosen.has_value()) {
    const auto it = std::find(ids.begin(), ids.end(), *chosen);
    if (it != ids.end()) std::rotate(ids.begin(), it, it + 1);
  }
  return ids;
}

std::string SearchReport::Summary() const {
  int passed = 0;
  std::string rejected;
  for (const CandidateResult& r : results) {
    if (r.ok) {
      ++passed;
    } else {
      absl::StrAppend(&rejected, rejected.empty() ? "" : "; ", r.id.ToString(), " ", r.detail);
    }
  }
  std::string text = absl::StrCat(results.size(), " candidates run or vetoed, ", passed,
                                  " passed, ", skipped.size(), " filtered out");
  if (!rejected.empty()) absl::StrAppend(&text, "; rejected: ", rejected);
  if (!skipped.empty()) {
    absl::StrAppend(&text, "; filtered: ", skipped.front(),
                    skipped.size() > 1 ? absl::StrCat(" and ", skipped.size() - 1, " more") : "");
  }
  return text;
}

}  // namespace convserve
