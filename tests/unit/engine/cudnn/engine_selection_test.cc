// Autotune's rule for the rounding path (engine_selection.h): float16 layers
// race it, bfloat16 and float32 layers do not, and it wins only by the
// margin when the winner rounds once.
#include "engine/cudnn/engine_selection.h"

#include <string>
#include <vector>

#include "engine/runtime/engine_search_report.h"

#include "gtest/gtest.h"

namespace convserve {
namespace {

ConvLayerProblem ProblemOf(DType dtype) {
  ConvLayerProblem problem;
  problem.dtype = dtype;
  return problem;
}

TEST(AutotuneRoundingTest, OnlyFloat16LayersAlsoTryTheRoundingPath) {
  EXPECT_TRUE(AutotuneAlsoTries(ProblemOf(DType::kFloat16), LayerPath::kUnfusedRounding));
  EXPECT_FALSE(AutotuneAlsoTries(ProblemOf(DType::kBFloat16), LayerPath::kUnfusedRounding));
  EXPECT_FALSE(AutotuneAlsoTries(ProblemOf(DType::kFloat32), LayerPath::kUnfusedRounding));
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    EXPECT_TRUE(AutotuneAlsoTries(ProblemOf(dtype), LayerPath::kUnfused));
  }
}

// Whether a candidate on `path` timed at `ms` ranks before one on
// `other_path` timed at `other_ms` (and so replaces it as the winner).
bool Outranks(float ms, LayerPath path, float other_ms, LayerPath other_path) {
  return AutotuneRankMs(ms, path) < AutotuneRankMs(other_ms, other_path);
}

TEST(AutotuneRoundingTest, TheRoundingPathNeedsTheMarginOverAWinnerThatRoundsOnce) {
  // Faster by less than the margin: the fused winner stays.
  EXPECT_FALSE(Outranks(0.9f, LayerPath::kUnfusedRounding, 1.0f, LayerPath::kFused));
  EXPECT_FALSE(Outranks(1.0f / kRoundingSpeedup, LayerPath::kUnfusedRounding, 1.0f,
                        LayerPath::kUnfused));
  // Faster by more: it replaces it (the depthwise case: 0.09 against 0.5 ms).
  EXPECT_TRUE(Outranks(0.09f, LayerPath::kUnfusedRounding, 0.5f, LayerPath::kFused));
  // Among rounding candidates, and on the other paths, faster is enough.
  EXPECT_TRUE(Outranks(0.08f, LayerPath::kUnfusedRounding, 0.09f,
                       LayerPath::kUnfusedRounding));
  EXPECT_TRUE(Outranks(0.99f, LayerPath::kUnfused, 1.0f, LayerPath::kFused));
  EXPECT_FALSE(Outranks(1.0f, LayerPath::kFused, 1.0f, LayerPath::kFused));
  // The margin holds whichever comes first: a candidate that rounds once,
  // timed after a rounding winner, takes its place unless the winner is
  // faster by the margin.
  EXPECT_TRUE(Outranks(1.2f, LayerPath::kFused, 1.0f, LayerPath::kUnfusedRounding));
  EXPECT_FALSE(Outranks(1.3f, LayerPath::kDirect, 1.0f, LayerPath::kUnfusedRounding));
}

CandidateResult Passed(const std::string& id, float ms) {
  CandidateResult result;
  result.id = *EngineConfigId::Parse(id);
  result.ok = true;
  result.ms = ms;
  return result;
}

// The server takes Ranked()'s first (the prober's report), the search's
// own caller its winner: both apply the rounding margin.
TEST(AutotuneRoundingTest, RankedAppliesTheMarginAsTheSearchDoes) {
  SearchReport report;
  report.timed = true;
  report.results = {Passed("fused:e1:", 1.0f), Passed("unfused_rounding:e2:", 0.9f),
                    Passed("unfused:e3:k2=1", 1.1f)};
  std::vector<std::string> ids;
  for (const EngineConfigId& id : report.Ranked()) ids.push_back(id.ToString());
  EXPECT_EQ(ids, (std::vector<std::string>{"fused:e1:", "unfused:e3:k2=1", "unfused_rounding:e2:"}));
  report.results[1].ms = 0.7f;  // 1.25 x 0.7 < 1.0: rounding twice pays
  ids.clear();
  for (const EngineConfigId& id : report.Ranked()) ids.push_back(id.ToString());
  EXPECT_EQ(ids, (std::vector<std::string>{"unfused_rounding:e2:", "fused:e1:", "unfused:e3:k2=1"}));
  // The search's winner, when it names one, comes first.
  report.chosen = *EngineConfigId::Parse("unfused:e3:k2=1");
  ids.clear();
  for (const EngineConfigId& id : report.Ranked()) ids.push_back(id.ToString());
  EXPECT_EQ(ids, (std::vector<std::string>{"unfused:e3:k2=1", "unfused_rounding:e2:", "fused:e1:"}));
}

}  // namespace
}  // namespace convserve
