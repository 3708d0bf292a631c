#include "engine/tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t ToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// binary16 decoded from its definition, independently of HalfToFloat.
double HalfValueFromDefinition(uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

bool IsHalfNaN(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }
bool IsBFloat16NaN(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }

TEST(TensorTest, DTypeSizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(LayoutName(Layout::kNDHWC), "NDHWC");
}

TEST(TensorTest, LayoutRankAndChannelOrder) {
  EXPECT_EQ(SpatialRank(Layout::kNCHW), 2);
  EXPECT_EQ(SpatialRank(Layout::kNHWC), 2);
  EXPECT_EQ(SpatialRank(Layout::kNCDHW), 3);
  EXPECT_EQ(SpatialRank(Layout::kNDHWC), 3);
  EXPECT_FALSE(IsChannelsLast(Layout::kNCHW));
  EXPECT_TRUE(IsChannelsLast(Layout::kNHWC));
  EXPECT_FALSE(IsChannelsLast(Layout::kNCDHW));
  EXPECT_TRUE(IsChannelsLast(Layout::kNDHWC));
}

TEST(TensorTest, NumElementsAndShapeToString) {
  EXPECT_EQ(NumElements({}), 0);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({2, 0, 4}), 0);
  EXPECT_EQ(ShapeToString({1, 3, 224, 224}), "[1, 3, 224, 224]");
}

TEST(TensorTest, PhysicalShapeMovesChannelsLast) {
  EXPECT_THAT(PhysicalShape({1, 3, 224, 200}, true), ElementsAre(1, 224, 200, 3));
  EXPECT_THAT(PhysicalShape({2, 3, 4, 5, 6}, true), ElementsAre(2, 4, 5, 6, 3));
  EXPECT_THAT(PhysicalShape({1, 3, 224, 200}, false), ElementsAre(1, 3, 224, 200));
  EXPECT_THAT(PhysicalShape({2, 3, 4, 5, 6}, false), ElementsAre(2, 3, 4, 5, 6));
  // Without spatial dims there is nothing to move.
  EXPECT_THAT(PhysicalShape({4, 3}, true), ElementsAre(4, 3));
}

// An empty tensor may come as null pointers (an empty vector's data()); the
// conversions must not pass them to memcpy, which UBSan reports (the ASan
// build's random_graph_test did, decoding a layer without a bias).
TEST(TensorTest, EmptyConversionsTakeNullPointers) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    ToFloat(dtype, nullptr, nullptr, 0);
    FromFloat(dtype, nullptr, nullptr, 0);
    std::vector<float> none;
    std::string bytes;
    ToFloat(dtype, bytes.data(), none.data(), none.size());
    FromFloat(dtype, none.data(), bytes.data(), none.size());
  }
}

TEST(TensorTest, HalfToFloatMatchesDefinitionForEveryNonNaNPattern) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(h);
    if (IsHalfNaN(h)) {
      EXPECT_TRUE(std::isnan(value)) << std::hex << bits;
    } else if ((h & 0x7fffu) == 0x7c00u) {
      EXPECT_EQ(value, (h & 0x8000u) ? -std::numeric_limits<float>::infinity()
                                     : std::numeric_limits<float>::infinity());
    } else {
      EXPECT_EQ(value, HalfValueFromDefinition(h)) << std::hex << bits;
      EXPECT_EQ(std::signbit(value), (h & 0x8000u) != 0) << std::hex << bits;
    }
  }
}

TEST(TensorTest, EveryHalfPatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const uint16_t back = FloatToHalf(HalfToFloat(h));
    if (IsHalfNaN(h)) {
      EXPECT_TRUE(IsHalfNaN(back)) << std::hex << bits << " -> " << back;
    } else {
      EXPECT_EQ(back, h) << std::hex << bits;
    }
  }
}

TEST(TensorTest, EveryBFloat16PatternRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const float value = BFloat16ToFloat(b);
    EXPECT_EQ(ToBits(value), bits << 16);
    const uint16_t back = FloatToBFloat16(value);
    if (IsBFloat16NaN(b)) {
      EXPECT_TRUE(IsBFloat16NaN(back)) << std::hex << bits << " -> " << back;
    } else {
      EXPECT_EQ(back, b) << std::hex << bits;
    }
  }
}

TEST(TensorTest, FloatToHalfRoundsKnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);  // 0.0999755859375
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  // Ties between 1 and its neighbours go to the even mantissa.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(FloatToHalf(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
  // A carry out of the mantissa bumps the exponent: 2047.9 -> 2048.
  EXPECT_EQ(FloatToHalf(2047.9f), 0x6800);
}

TEST(TensorTest, FloatToHalfOverflowsToInfinity) {
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie above the largest half
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(TensorTest, FloatToHalfHandlesSubnormals) {
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(-0x1p-24f), 0x8001);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie with zero: even
  EXPECT_EQ(FloatToHalf(-0x1p-25f), 0x8000);
  EXPECT_EQ(FloatToHalf(0x1.000002p-25f), 0x0001);      // just above the tie
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);         // tie between 1 and 2
  EXPECT_EQ(FloatToHalf(5 * 0x1p-25f), 0x0002);         // tie between 2 and 3
  EXPECT_EQ(FloatToHalf(1023 * 0x1p-24f), 0x03ff);      // largest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);  // tie 0x3ff/0x400: even
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
}

TEST(TensorTest, FloatToHalfKeepsNaN) {
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  // A payload only in the low bits would become infinity if truncated.
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(FromBits(0x7f800001u))));
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(FromBits(0xff800001u))));
}

// Every boundary between adjacent halves: the exact midpoint goes to the even
// neighbour, one float ulp either side goes to the nearer one.
TEST(TensorTest, FloatToHalfRoundsEveryMidpointToNearestEven) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = HalfToFloat(h);
    const float hi = HalfToFloat(h + 1);
    const float mid = lo + (hi - lo) / 2;  // exact: one more bit than a half
    const uint16_t even = (h & 1u) ? h + 1 : h;
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
    ASSERT_EQ(FloatToHalf(-mid), 0x8000u | even) << std::hex << h;
  }
}

TEST(TensorTest, RoundToTf32RoundsEveryMidpointToNearestEven) {
  // TF32 neighbours lo and hi (one TF32 step apart) at every exponent,
  // normal and subnormal, with odd and even last bits; mid halfway between.
  for (uint32_t exponent = 0; exponent < 0xff; ++exponent) {
    for (uint32_t mantissa : {0x000u, 0x001u, 0x2aau, 0x3feu}) {
      const uint32_t lo = (exponent << 23) | (mantissa << 13);
      const uint32_t hi = lo + 0x2000u, mid = lo + 0x1000u;
      const uint32_t even = (mantissa & 1u) ? hi : lo;
      ASSERT_EQ(ToBits(RoundToTf32(FromBits(lo))), lo) << std::hex << lo;
      ASSERT_EQ(ToBits(RoundToTf32(FromBits(mid))), even) << std::hex << lo;
      ASSERT_EQ(ToBits(RoundToTf32(FromBits(mid - 1))), lo) << std::hex << lo;
      ASSERT_EQ(ToBits(RoundToTf32(FromBits(mid + 1))), hi) << std::hex << lo;
      ASSERT_EQ(ToBits(RoundToTf32(FromBits(0x80000000u | (mid + 1)))), 0x80000000u | hi);
    }
  }
}

TEST(TensorTest, RoundToTf32KeepsSpecialValuesAndOverflowsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(RoundToTf32(inf), inf);
  EXPECT_EQ(RoundToTf32(-inf), -inf);
  EXPECT_TRUE(std::isnan(RoundToTf32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(ToBits(RoundToTf32(-0.0f)), 0x80000000u);
  EXPECT_EQ(RoundToTf32(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(ToBits(RoundToTf32(FromBits(0x7f7fefffu))), 0x7f7fe000u);
  EXPECT_EQ(RoundToTf32(1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);
  EXPECT_EQ(RoundToTf32(1.0f + 1.0f / 4096), 1.0f);
}

TEST(TensorTest, FloatToBFloat16RoundsKnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(3.140625f), 0x4049);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3f80);  // tie: even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
}

TEST(TensorTest, FloatToBFloat16OverflowsToInfinity) {
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7f7fffu)), 0x7f7f);  // largest bfloat16
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7f8000u)), 0x7f80);  // tie above it
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
}

TEST(TensorTest, FloatToBFloat16HandlesSubnormals) {
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00008000u)), 0x0000);  // tie with zero
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00018000u)), 0x0002);  // tie 1/2: even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00008001u)), 0x0001);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x007fffffu)), 0x0080);  // rounds up to normal
}

TEST(TensorTest, FloatToBFloat16KeepsNaN) {
  EXPECT_TRUE(IsBFloat16NaN(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN())));
  // Truncating this NaN's top half would give infinity.
  EXPECT_TRUE(IsBFloat16NaN(FloatToBFloat16(FromBits(0x7f800001u))));
  EXPECT_TRUE(IsBFloat16NaN(FloatToBFloat16(FromBits(0xff800001u))));
}

TEST(TensorTest, FloatToBFloat16RoundsEveryMidpointToNearestEven) {
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    const uint32_t mid = (b << 16) | 0x8000u;
    const uint16_t even = (b & 1u) ? b + 1 : b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid)), even) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid - 1)), b) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid + 1)), b + 1) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(FromBits(mid | 0x80000000u)), 0x8000u | even) << std::hex << b;
  }
}

TEST(TensorTest, FromFloatWritesLittleEndianElements) {
  const float values[] = {1.0f, -2.0f};
  unsigned char half[4];
  FromFloat(DType::kFloat16, values, half, 2);
  EXPECT_THAT(half, ElementsAre(0x00, 0x3c, 0x00, 0xc0));
  unsigned char bf16[4];
  FromFloat(DType::kBFloat16, values, bf16, 2);
  EXPECT_THAT(bf16, ElementsAre(0x80, 0x3f, 0x00, 0xc0));
  unsigned char f32[8];
  FromFloat(DType::kFloat32, values, f32, 2);
  EXPECT_THAT(f32, ElementsAre(0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0));
}

TEST(TensorTest, ToFloatInvertsFromFloatOnRepresentableValues) {
  const std::vector<float> values = {0.5f, -3.0f, 0x1p-24f, 65504.0f, 0.0f, -1.5f};
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    std::vector<unsigned char> bytes(values.size() * DTypeSize(dtype));
    FromFloat(dtype, values.data(), bytes.data(), values.size());
    std::vector<float> back(values.size());
    ToFloat(dtype, bytes.data(), back.data(), back.size());
    EXPECT_THAT(back, ElementsAreArray(values)) << DTypeName(dtype);
  }
}

TEST(TensorTest, RoundToDTypeRoundsToNearestRepresentable) {
  std::vector<float> values = {1.0f + 3 * 0x1p-11f, 0.1f, 70000.0f};
  RoundToDType(DType::kFloat16, values.data(), values.size());
  EXPECT_THAT(values, ElementsAre(1.0f + 2 * 0x1p-10f, HalfToFloat(0x2e66),
                                  std::numeric_limits<float>::infinity()));
  values = {1.0f + 3 * 0x1p-8f, 0.1f};
  RoundToDType(DType::kBFloat16, values.data(), values.size());
  EXPECT_THAT(values, ElementsAre(1.0f + 2 * 0x1p-7f, BFloat16ToFloat(0x3dcd)));
  values = {0.1f};
  RoundToDType(DType::kFloat32, values.data(), values.size());
  EXPECT_THAT(values, ElementsAre(0.1f));
}

TEST(TensorTest, ChannelsFirstToLastMovesEveryElement) {
  const Shape shape = {2, 3, 4, 5};  // N, C, H, W
  std::vector<float> first(NumElements(shape));
  std::iota(first.begin(), first.end(), 0.0f);
  std::vector<float> last(first.size(), -1.0f);
  ChannelsFirstToLast(shape, first.data(), last.data());
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t w = 0; w < 5; ++w) {
          ASSERT_EQ(last[((n * 4 + h) * 5 + w) * 3 + c], first[((n * 3 + c) * 4 + h) * 5 + w])
              << n << "," << c << "," << h << "," << w;
        }
      }
    }
  }
}

TEST(TensorTest, ChannelsLastToFirstInvertsFirstToLast) {
  for (const Shape& shape :
       {Shape{1, 3, 7, 9}, Shape{3, 5, 3, 5, 6}, Shape{2, 1, 4, 4}, Shape{2, 6, 1, 1}}) {
    std::vector<float> original(NumElements(shape));
    std::iota(original.begin(), original.end(), 1.0f);
    std::vector<float> last(original.size());
    std::vector<float> back(original.size());
    ChannelsFirstToLast(shape, original.data(), last.data());
    ChannelsLastToFirst(shape, last.data(), back.data());
    EXPECT_EQ(back, original) << ShapeToString(shape);
    if (shape[1] > 1 && shape[2] * (shape.size() > 3 ? shape[3] : 1) > 1) {
      EXPECT_NE(last, original) << ShapeToString(shape);
    }
  }
}

}  // namespace
}  // namespace convserve
