// Which pairs of layers the pointwise pair kernel runs and the shared memory
// it needs (pointwise_pair.h). No GPU needed.
#include "engine/cudnn/pointwise_pair.h"

#include <string>

#include "gtest/gtest.h"

namespace convserve {
namespace {

// An H100's opt-in shared memory per block.
constexpr int64_t kH100SharedBytes = 227 << 10;

ConvLayerProblem Pointwise(int64_t n, int64_t c, int64_t k, int64_t size) {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.channels_last = true;
  p.input = {n, c, size, size};
  p.weights = {k, c, 1, 1};
  p.output = {n, k, size, size};
  p.stride = {1, 1};
  p.dilation = {1, 1};
  p.pad_before = {0, 0};
  p.pad_after = {0, 0};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

// A ResNet-50 bottleneck's expand 1x1 and the next block's reduce 1x1.
TEST(PointwisePairTest, TheResNetPairRuns) {
  const ConvLayerProblem expand = Pointwise(32, 64, 256, 56);
  const ConvLayerProblem reduce = Pointwise(32, 256, 64, 56);
  EXPECT_EQ(PointwisePairRejection(expand, reduce, kH100SharedBytes), "");
  // w0 256 x (64 + 8), w1 64 x (256 + 8), two 128 x (64 + 8) input tiles,
  // in 2-byte elements; 320 float biases.
  EXPECT_EQ(PointwisePairSharedBytes(expand, reduce),
            (256 * 72 + 64 * 264 + 2 * 128 * 72) * 2 + 320 * 4);
  ConvLayerProblem bfloat16_expand = expand, bfloat16_reduce = reduce;
  bfloat16_expand.dtype = bfloat16_reduce.dtype = DType::kBFloat16;
  bfloat16_expand.has_bias = false;
  bfloat16_reduce.activation.kind = ActivationKind::kGelu;
  EXPECT_EQ(PointwisePairRejection(bfloat16_expand, bfloat16_reduce, kH100SharedBytes), "");
}

TEST(PointwisePairTest, OtherPairsAreRejectedWithTheReason) {
  const ConvLayerProblem expand = Pointwise(1, 64, 256, 7);
  const ConvLayerProblem reduce = Pointwise(1, 256, 64, 7);
  const auto rejection = [](ConvLayerProblem first, ConvLayerProblem second) {
    return PointwisePairRejection(first, second, kH100SharedBytes);
  };
  ConvLayerProblem a = expand, b = reduce;
  a.dtype = b.dtype = DType::kFloat32;
  EXPECT_EQ(rejection(a, b), "first layer: the pair kernel runs float16 and bfloat16 only");
  b = reduce;
  b.channels_last = false;
  EXPECT_EQ(rejection(expand, b),
            "second layer: the pair kernel runs channels-last (NHWC) tensors only");
  a = expand;
  a.weights = {256, 64, 3, 3};
  a.pad_before = a.pad_after = {1, 1};
  EXPECT_EQ(rejection(a, reduce), "first layer: not a 1x1 convolution");
  b = reduce;
  b.stride = {2, 2};
  b.output = {1, 64, 4, 4};
  EXPECT_EQ(rejection(expand, b),
            "second layer: a 1x1 convolution with a stride, dilation or padding");
  b = reduce;
  b.weights = {64, 128, 1, 1};  // two groups
  EXPECT_EQ(rejection(expand, b), "second layer: a grouped convolution");
  b = Pointwise(1, 256, 64, 5);
  EXPECT_EQ(rejection(expand, b), "the second layer does not read the first's output");
  EXPECT_EQ(rejection(Pointwise(1, 48, 256, 7), reduce),
            "the outer channel counts are 48 and 64; the pair kernel is built for 32 and 64");
  EXPECT_EQ(rejection(expand, Pointwise(1, 256, 128, 7)),
            "the outer channel counts are 64 and 128; the pair kernel is built for 32 and 64");
  EXPECT_EQ(rejection(Pointwise(1, 64, 80, 7), Pointwise(1, 80, 64, 7)),
            "the inner channel count 80 is not a multiple of 32");
  // 2048 inner channels: 2048 x 72 + 64 x 2056 + 2 x 128 x 72 halves + 2112
  // floats, over an H100's 227 KiB.
  const ConvLayerProblem wide = Pointwise(1, 64, 2048, 7);
  EXPECT_EQ(rejection(wide, Pointwise(1, 2048, 64, 7)),
            "the weights need 603392 bytes of shared memory per block; the GPU allows 232448");
  // The largest inner count that fits with 64 outer channels: 704, exactly
  // 232,448 bytes; 736 needs 8,832 more.
  EXPECT_EQ(rejection(Pointwise(1, 64, 704, 7), Pointwise(1, 704, 64, 7)), "");
  EXPECT_EQ(rejection(Pointwise(1, 64, 736, 7), Pointwise(1, 736, 64, 7)),
            "the weights need 241280 bytes of shared memory per block; the GPU allows 232448");
}

}  // namespace
}  // namespace convserve
