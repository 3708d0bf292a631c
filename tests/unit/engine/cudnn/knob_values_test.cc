// The values autotune's knob search tries for one knob (NearestKnobValues,
// engine_candidates.h): nearest first on the knob's grid, within its range,
// never the current value, an off-grid current value snapped first, and no
// overflow on ranges as wide as int64.
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cudnn/engine_candidates.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using Values = std::vector<int64_t>;

TEST(KnobValuesTest, NearestFirstAlternatingBelowAndAbove) {
  const KnobRange knob{/*type=*/2, /*min=*/0, /*max=*/20, /*stride=*/1};
  EXPECT_EQ(NearestKnobValues(knob, 10), (Values{9, 11, 8, 12, 7, 13}));
}

TEST(KnobValuesTest, StaysInsideTheRange) {
  const KnobRange knob{2, 0, 4, 1};
  EXPECT_EQ(NearestKnobValues(knob, 0), (Values{1, 2, 3}));
  EXPECT_EQ(NearestKnobValues(knob, 4), (Values{3, 2, 1}));
  EXPECT_EQ(NearestKnobValues(knob, 1), (Values{0, 2, 3, 4}));
  const KnobRange two{2, 0, 1, 1};
  EXPECT_EQ(NearestKnobValues(two, 1), (Values{0}));
}

TEST(KnobValuesTest, FollowsTheStride) {
  const KnobRange knob{17, 8, 64, 8};
  EXPECT_EQ(NearestKnobValues(knob, 24), (Values{16, 32, 8, 40, 48}));
}

TEST(KnobValuesTest, AnOffGridValueIsSnappedFirst) {
  const KnobRange knob{17, 0, 40, 8};
  EXPECT_EQ(NearestKnobValues(knob, 19), (Values{16, 8, 24, 0, 32, 40}));
  // Outside the range: clamped, then snapped.
  EXPECT_EQ(NearestKnobValues(knob, 100), (Values{40, 32, 24, 16}));
}

TEST(KnobValuesTest, RangesAsWideAsInt64DoNotOverflow) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const KnobRange wide{12, -1, max, 1};
  EXPECT_EQ(NearestKnobValues(wide, -1), (Values{0, 1, 2}));
  EXPECT_EQ(NearestKnobValues(wide, max), (Values{max - 1, max - 2, max - 3}));
  const KnobRange widest{12, std::numeric_limits<int64_t>::min(), max, 1};
  EXPECT_EQ(NearestKnobValues(widest, 0), (Values{-1, 1, -2, 2, -3, 3}));
}

}  // namespace
}  // namespace convserve
