// The narrow GEMM's packed weights (DirectNarrowPackedWeights,
// direct_conv.h): which layers have them, their size, and where each
// weight lands, against the layout the kernel reads (DirectNarrowLayoutOf).
// No GPU needed.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cudnn/direct_conv.h"
#include "engine/tensor.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

// A channels-last stem-like layer: 7x7 stride 2 on `c` channels into `k`.
ConvLayerProblem Narrow(DType dtype, int64_t c, int64_t k) {
  ConvLayerProblem p;
  p.dtype = dtype;
  p.channels_last = true;
  p.input = {1, c, 224, 224};
  p.weights = {k, c, 7, 7};
  p.output = {1, k, 112, 112};
  p.stride = {2, 2};
  p.dilation = {1, 1};
  p.pad_before = p.pad_after = {3, 3};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

// Random KRSC weights of `p`, every element 0.25 to 1 in magnitude.
std::string RandomWeights(const ConvLayerProblem& p, std::mt19937_64* rng) {
  const int64_t count = p.weights[0] * p.weights[1] * p.weights[2] * p.weights[3];
  std::uniform_real_distribution<float> magnitude(0.25f, 1.f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = ((*rng)() % 2 == 0 ? 1.f : -1.f) * magnitude(*rng);
  std::string bytes(values.size() * DTypeSize(p.dtype), '\0');
  FromFloat(p.dtype, values.data(), bytes.data(), values.size());
  return bytes;
}

// Element `i` of `bytes` (of `dtype`) as a float.
float At(DType dtype, const std::string& bytes, int64_t i) {
  float value = 0;
  ToFloat(dtype, bytes.data() + static_cast<size_t>(i) * DTypeSize(dtype), &value, 1);
  return value;
}

TEST(NarrowPackingTest, EachWeightLandsWhereTheKernelReadsIt) {
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    // 72 output channels: two tiles of 64, the second with 8 real channels.
    const ConvLayerProblem p = Narrow(dtype, 3, 72);
    const DirectNarrowLayout l = DirectNarrowLayoutOf(p, 128);
    const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
    ASSERT_EQ(DirectNarrowPackedBytes(p), 128 * l.weight_stride * size) << DTypeName(dtype);
    const std::string krsc = RandomWeights(p, &rng);
    const std::string packed = DirectNarrowPackedWeights(p, krsc);
    ASSERT_EQ(static_cast<int64_t>(packed.size()), DirectNarrowPackedBytes(p));
    const int64_t row_pitch = l.groups * (16 / size);
    int64_t placed = 0, zeros = 0;
    for (int64_t c = 0; c < 128; ++c) {
      for (int64_t e = 0; e < l.weight_stride; ++e) {
        const int64_t r = e / row_pitch, within = e % row_pitch;
        const float got = At(dtype, packed, c * l.weight_stride + e);
        if (c < 72 && r < 7 && within < l.row) {
          const float want = At(dtype, krsc, (c * 7 + r) * l.row + within);
          ASSERT_EQ(got, dtype == DType::kFloat32 ? RoundToTf32(want) : want)
              << DTypeName(dtype) << " channel " << c << " element " << e;
          ++placed;
        } else {
          ASSERT_EQ(got, 0.f) << DTypeName(dtype) << " channel " << c << " element " << e;
          ++zeros;
        }
      }
    }
    EXPECT_EQ(placed, 72 * 7 * 21);
    EXPECT_EQ(placed + zeros, 128 * l.weight_stride);
  }
}

TEST(NarrowPackingTest, Float32IsRoundedToTf32) {
  ConvLayerProblem p = Narrow(DType::kFloat32, 3, 8);
  std::string krsc(8 * 3 * 7 * 7 * sizeof(float), '\0');
  const float value = 1.f + 1.f / 4096;  // below TF32's 10 mantissa bits
  std::memcpy(krsc.data(), &value, sizeof(value));
  const std::string packed = DirectNarrowPackedWeights(p, krsc);
  float first = 0;
  std::memcpy(&first, packed.data(), sizeof(first));
  EXPECT_EQ(first, RoundToTf32(value));
  EXPECT_NE(first, value);
}

TEST(NarrowPackingTest, OnlyLayersTheNarrowGemmRunsArePacked) {
  // The implicit GEMM's layers (channels a multiple of its step), other
  // layouts and kernel rows over 48 elements have no packed copy; the
  // input's size does not matter.
  ConvLayerProblem p = Narrow(DType::kFloat16, 32, 64);
  p.weights[2] = p.weights[3] = 1;
  EXPECT_EQ(DirectNarrowPackedBytes(p), 0);
  p = Narrow(DType::kFloat16, 3, 64);
  p.channels_last = false;
  EXPECT_EQ(DirectNarrowPackedBytes(p), 0);
  p = Narrow(DType::kFloat16, 7, 64);  // rows of 49
  EXPECT_EQ(DirectNarrowPackedBytes(p), 0);
  EXPECT_EQ(DirectNarrowPackedWeights(p, std::string(64 * 7 * 49 * 2, '\1')), "");
  p = Narrow(DType::kFloat16, 3, 64);
  const int64_t bytes = DirectNarrowPackedBytes(p);
  EXPECT_GT(bytes, 0);
  // Weights of another size are refused, not read past.
  EXPECT_EQ(DirectNarrowPackedWeights(p, std::string(64 * 3 * 49 * 2 - 2, '\1')), "");
  EXPECT_EQ(DirectNarrowPackedWeights(p, std::string(64 * 3 * 49 * 2, '\1')).size(),
            static_cast<size_t>(bytes));
  p.input = {1, 3, 7, 7};
  p.output = {1, 64, 1, 1};
  EXPECT_EQ(DirectNarrowPackedBytes(p), bytes);
}

}  // namespace
}  // namespace convserve
