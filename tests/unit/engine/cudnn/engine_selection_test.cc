// Autotune's rule for the rounding path (engine_selection.h): float16 layers
// race it, bfloat16 and float32 layers do not, and it wins only by the
// margin when the winner rounds once.
#include "engine/cudnn/engine_selection.h"

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

TEST(AutotuneRoundingTest, TheRoundingPathNeedsTheMarginOverAWinnerThatRoundsOnce) {
  // Faster by less than the margin: the fused winner stays.
  EXPECT_FALSE(AutotuneReplaces(0.9f, LayerPath::kUnfusedRounding, 1.0f, LayerPath::kFused));
  EXPECT_FALSE(AutotuneReplaces(1.0f / kRoundingSpeedup, LayerPath::kUnfusedRounding, 1.0f,
                                LayerPath::kUnfused));
  // Faster by more: it replaces it (the depthwise case: 0.09 against 0.5 ms).
  EXPECT_TRUE(AutotuneReplaces(0.09f, LayerPath::kUnfusedRounding, 0.5f, LayerPath::kFused));
  // Among rounding candidates, and on the other paths, faster is enough.
  EXPECT_TRUE(AutotuneReplaces(0.08f, LayerPath::kUnfusedRounding, 0.09f,
                               LayerPath::kUnfusedRounding));
  EXPECT_TRUE(AutotuneReplaces(0.99f, LayerPath::kUnfused, 1.0f, LayerPath::kFused));
  EXPECT_FALSE(AutotuneReplaces(1.0f, LayerPath::kFused, 1.0f, LayerPath::kFused));
}

}  // namespace
}  // namespace convserve
