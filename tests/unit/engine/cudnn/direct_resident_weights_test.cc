// Which layers and configurations the direct path's two GEMMs that keep
// their weights in shared memory have (direct_conv.h): the pointwise GEMM
// (engine 3, 1x1 layers) and the halo GEMM (engine 4, 3x3 layers), what
// each refuses, and what GPU they need. No GPU needed.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/cudnn/pointwise_pair.h"
#include "gtest/gtest.h"
#include "tests/test_util/config_id.h"

namespace convserve {
namespace {

// A float16 NHWC layer with bias and ReLU, stride and dilation 1 and
// padding 1, of `input` and `weights` (the output as large as the input).
ConvLayerProblem Layer(Shape input, Shape weights) {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.channels_last = true;
  p.input = input;
  p.weights = weights;
  p.output = {input[0], weights[0], input[2], input[3]};
  p.stride = {1, 1};
  p.dilation = {1, 1};
  p.pad_before = {1, 1};
  p.pad_after = {1, 1};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

// Configuration `config` of engine `engine` runs `p` on compute capability
// 8.0 under --strict_float32 (it multiplies no float32) and is refused
// below 8.0 for want of mma.sync.
void ExpectMmaSyncNeededAndNoFloat32(const ConvLayerProblem& p, const std::string& config,
                                     const std::string& engine) {
  EngineSelection selection;
  selection.strict_float32 = true;
  CudnnTarget target;
  target.compute_capability = 80;
  EXPECT_EQ(ConfigRejection(selection, target, p, ConfigId(config)), "");
  target.compute_capability = 75;
  EXPECT_NE(ConfigRejection(selection, target, p, ConfigId(config))
                .find(engine + " needs mma.sync (compute capability 8.0; this GPU has 7.5)"),
            std::string::npos)
      << config;
}

// ResNet-50's expand 1x1 at 56x56 and batch 32: 64 -> 256 channels,
// float16 NHWC.
ConvLayerProblem Expand() {
  ConvLayerProblem p = Layer({32, 64, 56, 56}, {256, 64, 1, 1});
  p.pad_before = p.pad_after = {0, 0};
  return p;
}

TEST(DirectResidentWeightsTest, OneByOneLayersOnFewChannelsHaveThePointwiseGemm) {
  ConvLayerProblem p = Expand();
  EXPECT_EQ(DirectPointwiseRejection(p), "");
  // 784 tiles of 128 pixels: one block an SM (132) comes nearest 132, two
  // (264) next, then the implicit GEMM's 6,272 to 25,088 blocks.
  EXPECT_EQ(DirectConfigNames(p), (std::vector<std::string>{
                                "direct:e3:k5=1", "direct:e3:k5=2", "direct:e1:k2=64,k3=1",
                                "direct:e1:k2=64,k3=2", "direct:e1:k2=32,k3=1",
                                "direct:e1:k2=32,k3=2"}));
  // At batch 1, 25 tiles: a block a tile leaves most SMs idle, so blocks
  // of 64 or 128 of the 256 output channels are listed too (100 and 50
  // blocks), all in the implicit GEMM's order, nearest 132 blocks first.
  p.input[0] = p.output[0] = 1;
  EXPECT_EQ(DirectConfigNames(p), (std::vector<std::string>{
                                "direct:e3:k2=64,k5=2", "direct:e3:k2=64,k5=1",
                                "direct:e1:k2=64,k3=1", "direct:e3:k2=128,k5=2",
                                "direct:e3:k2=128,k5=1", "direct:e1:k2=64,k3=2",
                                "direct:e1:k2=32,k3=1", "direct:e3:k5=2", "direct:e3:k5=1",
                                "direct:e1:k2=32,k3=2"}));
  // A whole number of blocks a slice, a tile each at most.
  EXPECT_EQ(PointwiseTileBlocks(3136, 256 / 64, 264), 100);
  EXPECT_EQ(PointwiseTileBlocks(3136, 256 / 256, 264), 25);
  EXPECT_EQ(PointwiseTileBlocks(100352, 256 / 64, 264), 264);
  EXPECT_EQ(PointwiseTileBlocks(100352, 256 / 128, 132), 132);
  EXPECT_EQ(PointwiseTileBlocks(100352, 512 / 64, 4), 8);

  // bfloat16, 32 input channels and up to 512 outputs too.
  p.dtype = DType::kBFloat16;
  p.input = {1, 32, 56, 56};
  p.weights = {512, 32, 1, 1};
  p.output = {1, 512, 56, 56};
  EXPECT_EQ(DirectPointwiseRejection(p), "");
  EXPECT_EQ(DirectConfigRejection(p, ConfigId("direct:e3:k5=2")), "");
  EXPECT_EQ(DirectConfigRejection(p, ConfigId("direct:e3:k5=1")), "");
  EXPECT_EQ(DirectConfigRejection(p, ConfigId("direct:e3:k2=64,k5=2")), "");
  EXPECT_EQ(DirectConfigRejection(p, ConfigId("direct:e3:k2=128,k5=1")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e3:k5=3")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e3:k2=96,k5=2")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e3:k2=512,k5=2")), "");
  // Not at batch 32 (784 tiles fill the SMs already).
  p.input[0] = p.output[0] = 32;
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e3:k2=64,k5=2")), "");

  // What it refuses (the implicit GEMM still runs each but the last).
  const auto rejection = [](ConvLayerProblem q) {
    for (const EngineConfigId& id : DirectConvConfigs(q)) {
      EXPECT_NE(id.engine, kDirectPointwiseEngine) << id.ToString();
    }
    return DirectPointwiseRejection(q);
  };
  ConvLayerProblem q = Expand();
  q.input[1] = q.weights[1] = 128;
  EXPECT_EQ(rejection(q), "the pointwise GEMM is built for 32 or 64 input channels (have 128)");
  q = Expand();
  q.output[1] = q.weights[0] = 544;
  EXPECT_EQ(rejection(q),
            "the pointwise GEMM needs output channels a multiple of 32 up to 512 (have 544)");
  q.output[1] = q.weights[0] = 48;
  EXPECT_EQ(rejection(q),
            "the pointwise GEMM needs output channels a multiple of 32 up to 512 (have 48)");
  q = Expand();
  q.stride = {2, 2};
  q.output[2] = q.output[3] = 28;
  EXPECT_EQ(rejection(q), "a 1x1 convolution with a stride, dilation or padding");
  q = Expand();
  q.weights[2] = q.weights[3] = 3;
  q.pad_before = q.pad_after = {1, 1};
  EXPECT_EQ(rejection(q), "not a 1x1 convolution");
  q = Expand();
  q.channels_last = false;
  EXPECT_EQ(rejection(q), "the pointwise GEMM runs channels-last (NHWC) tensors only");

  ExpectMmaSyncNeededAndNoFloat32(p, "direct:e3:k5=2", "the pointwise GEMM");
}

// The pointwise GEMM's configurations of `p`, in DirectConvConfigs' order.
std::vector<std::string> PointwiseConfigNames(const ConvLayerProblem& p) {
  std::vector<std::string> names;
  for (const std::string& name : DirectConfigNames(p)) {
    if (name.rfind("direct:e3:", 0) == 0) names.push_back(name);
  }
  return names;
}

// float32 (in TF32): the weights kept swizzled, without padding, so the
// blocks an SM and the slices follow from their shared memory.
TEST(DirectResidentWeightsTest, FloatOneByOneLayersHaveThePointwiseGemmInTf32) {
  ConvLayerProblem p = Expand();
  p.dtype = DType::kFloat32;
  EXPECT_EQ(DirectPointwiseRejection(p), "");
  // 256 x 64 float weights, two tiles of 128 pixels (rows of 64 floats and
  // 16 bytes), 256 float biases: one block an SM.
  EXPECT_EQ(DirectPointwiseSharedBytes(64, 256, 4), 256 * 64 * 4 + 2 * 128 * 272 + 256 * 4);
  EXPECT_EQ(PointwiseConfigNames(p), std::vector<std::string>{"direct:e3:k5=1"});
  // At batch 1 (25 tiles) slices of 128 and 64 too, two blocks an SM.
  p.input[0] = p.output[0] = 1;
  EXPECT_EQ(PointwiseConfigNames(p),
            (std::vector<std::string>{"direct:e3:k2=64,k5=2", "direct:e3:k2=64,k5=1",
                                      "direct:e3:k2=128,k5=2", "direct:e3:k2=128,k5=1",
                                      "direct:e3:k5=1"}));
  // 512 outputs at batch 32: all fit in one block an SM (198 KiB).
  p.input[0] = p.output[0] = 32;
  p.output[1] = p.weights[0] = 512;
  EXPECT_EQ(PointwiseConfigNames(p), std::vector<std::string>{"direct:e3:k5=1"});
  // 64 outputs on 32 channels: two blocks an SM.
  p.input[1] = p.weights[1] = 32;
  p.output[1] = p.weights[0] = 64;
  EXPECT_EQ(PointwiseConfigNames(p),
            (std::vector<std::string>{"direct:e3:k5=1", "direct:e3:k5=2"}));
  // --strict_float32 refuses it, as every TF32 engine.
  EngineSelection strict;
  strict.strict_float32 = true;
  EXPECT_EQ(ConfigRejection(strict, CudnnTarget{}, p, ConfigId("direct:e3:k5=1")),
            "the pointwise GEMM multiplies float32 in TF32 (--strict_float32)");
}

// ResNet-50's 3x3 64 @ 56, float16 NHWC, at batch `n`.
ConvLayerProblem ThreeByThree(int64_t n) { return Layer({n, 64, 56, 56}, {64, 64, 3, 3}); }

TEST(DirectResidentWeightsTest, ThreeByThreeLayersOnFewChannelsHaveTheHaloGemm) {
  ConvLayerProblem p = ThreeByThree(1);
  EXPECT_EQ(DirectHaloRejection(p), "");
  // Batch 1: 14 x 4 tiles of 4 rows by 16 columns, 7 x 4 of 8 rows; 64
  // channels a block, or 2 x 32. The halo GEMM's 112 blocks (4 rows, 32
  // channels) come nearest 132, then the implicit GEMM's 98 (49 tiles of
  // 64 channels, each split in 2). No split taps on 64 channels.
  const std::vector<std::string> names = DirectConfigNames(p);
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names[0], "direct:e4:k2=32,k6=4");
  EXPECT_EQ(names[1], "direct:e1:k2=64,k3=2");
  const auto count = [](const std::vector<std::string>& names, const char* prefix) {
    int n = 0;
    for (const std::string& name : names) n += name.rfind(prefix, 0) == 0;
    return n;
  };
  EXPECT_EQ(count(names, "direct:e4:"), 4);
  // Split: a kernel row's 3 taps of weights, halos of 4 rows (no halo
  // rows), and a mailbox of each of the 128 threads' 32 float sums and its
  // two barriers besides the bias.
  EXPECT_EQ(DirectHaloSharedBytes(p, 4, 64, 3),
            (3 * 64 * 64 + 2 * 4 * 18 * 72 + 4 * 16 * 72) * 2 + (64 + 128 * 32) * 4 + 16);
  // The shared memory of a block: 9 taps of 64 x 64 weights, two halos of
  // 6 x 18 pixels (rows of 72 elements), 4 warps' 16 staged rows of 72,
  // and 64 float biases: two blocks fit an H100's SM.
  EXPECT_EQ(DirectHaloSharedBytes(p, 4, 64),
            (9 * 64 * 64 + 2 * 6 * 18 * 72 + 4 * 16 * 72) * 2 + 64 * 4);
  EXPECT_LE(2 * (DirectHaloSharedBytes(p, 4, 64) + 1024), kDirectSharedBytesPerSm);
  // Any padding, 32 channels, bfloat16, K a multiple of 32 (no 64-channel
  // tile when 64 does not divide it).
  p.dtype = DType::kBFloat16;
  p.input = {2, 32, 9, 13};
  p.weights = {96, 32, 3, 3};
  p.pad_before = {0, 2};
  p.pad_after = {2, 0};
  p.output = {2, 96, 9, 13};
  EXPECT_EQ(DirectHaloRejection(p), "");
  EXPECT_EQ(DirectConfigRejection(p, ConfigId("direct:e4:k2=32,k6=8")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e4:k2=64,k6=8")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e4:k2=32,k6=2")), "");
  // 128 channels: 3 of the 4 tiles fit in shared memory (8 rows of 64
  // output channels: 147,456 bytes of weights, 97,920 of halos).
  p.input[1] = p.weights[1] = 128;
  p.weights[0] = p.output[1] = 128;
  EXPECT_EQ(DirectHaloRejection(p), "");
  EXPECT_GT(DirectHaloSharedBytes(p, 8, 64), kDirectMaxSharedBytes);
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e4:k2=64,k6=8")), "");
  for (const char* name :
       {"direct:e4:k2=64,k6=4", "direct:e4:k2=32,k6=4", "direct:e4:k2=32,k6=8"}) {
    EXPECT_EQ(DirectConfigRejection(p, ConfigId(name)), "") << name;
  }
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e4:k2=32,k6=4,k7=3")), "");
  // 256 channels (ResNet-50's 3x3 256 @ 14 at batch 1: 4 tiles of 4 rows,
  // 2 of 8): only the split tiles fit, and only for layers of few tiles;
  // 8 rows of 64 output channels with one halo buffer (225,808 bytes: 8
  // rows of 18 pixels of 528 elements, a mailbox of 256 threads' 32 sums).
  ConvLayerProblem wide = Layer({1, 256, 14, 14}, {256, 256, 3, 3});
  EXPECT_EQ(DirectHaloRejection(wide), "");
  EXPECT_GT(DirectHaloSharedBytes(wide, 4, 32), kDirectMaxSharedBytes);
  EXPECT_GT(DirectHaloSharedBytes(wide, 8, 64, 3), kDirectMaxSharedBytes);
  EXPECT_EQ(DirectHaloSharedBytes(wide, 8, 64, 3, 1),
            (3 * 64 * 256 + 8 * 18 * 264 + 8 * 16 * 72) * 2 + (64 + 256 * 32) * 4 + 16);
  EXPECT_EQ(DirectHaloBuffers(256, 8, 64, 3, 2), 1);
  EXPECT_EQ(DirectHaloBuffers(256, 8, 32, 3, 2), 2);
  EXPECT_EQ(DirectHaloBuffers(256, 4, 32, 1, 2), 0);  // unsplit: two buffers or none
  std::vector<std::string> wide_names = DirectConfigNames(wide);
  wide_names.erase(std::remove_if(wide_names.begin(), wide_names.end(),
                                  [](const std::string& n) { return n.rfind("direct:e4:", 0); }),
                   wide_names.end());
  EXPECT_EQ(wide_names,
            (std::vector<std::string>{"direct:e4:k2=32,k6=4,k7=3", "direct:e4:k2=64,k6=4,k7=3",
                                      "direct:e4:k2=32,k6=8,k7=3",
                                      "direct:e4:k2=64,k6=8,k7=3,k9=1"}));
  EXPECT_NE(DirectConfigRejection(wide, ConfigId("direct:e4:k2=32,k6=4")), "");
  EXPECT_NE(DirectConfigRejection(wide, ConfigId("direct:e4:k2=32,k6=4,k7=2")), "");
  // One buffer only where two do not fit.
  EXPECT_NE(DirectConfigRejection(wide, ConfigId("direct:e4:k2=32,k6=4,k7=3,k9=1")), "");
  EXPECT_NE(DirectConfigRejection(wide, ConfigId("direct:e4:k2=64,k6=8,k7=3")), "");
  // At batch 32 (256 tiles of 4 rows) the blocks would fill the GPU
  // unsplit, and unsplit they do not fit: none.
  wide.input[0] = wide.output[0] = 32;
  EXPECT_EQ(DirectHaloRejection(wide), "");
  EXPECT_EQ(count(DirectConfigNames(wide), "direct:e4:"), 0);

  // What it refuses (the implicit GEMM still runs each).
  const auto rejection = [](ConvLayerProblem q) {
    for (const EngineConfigId& id : DirectConvConfigs(q)) {
      EXPECT_NE(id.engine, kDirectHaloEngine) << id.ToString();
    }
    EXPECT_FALSE(DirectConvConfigs(q).empty());
    return DirectHaloRejection(q);
  };
  ConvLayerProblem q = ThreeByThree(1);
  q.input[1] = q.weights[1] = 96;
  EXPECT_EQ(rejection(q),
            "the halo GEMM is built for 32, 64, 128 or 256 input channels (have 96)");
  q = ThreeByThree(1);
  q.output[1] = q.weights[0] = 40;
  EXPECT_EQ(rejection(q), "the halo GEMM needs output channels a multiple of 32 (have 40)");
  q = ThreeByThree(1);
  q.stride = {2, 2};
  q.output[2] = q.output[3] = 28;
  EXPECT_EQ(rejection(q), "the halo GEMM needs stride and dilation 1");
  q = ThreeByThree(1);
  q.dilation = {1, 2};
  q.output[3] = 54;
  EXPECT_EQ(rejection(q), "the halo GEMM needs stride and dilation 1");
  q = ThreeByThree(1);
  q.input[2] = q.output[2] = 1;
  q.input[3] = q.output[3] = 4'000'000;
  EXPECT_EQ(rejection(q),
            "the halo GEMM indexes 10 input rows with 32-bit offsets; a row has 256000000 "
            "elements");
  q = ThreeByThree(1);
  q.weights[2] = q.weights[3] = 1;
  q.pad_before = q.pad_after = {0, 0};
  EXPECT_EQ(rejection(q), "the halo GEMM runs 3x3 kernels only");

  ExpectMmaSyncNeededAndNoFloat32(p, "direct:e4:k2=32,k6=4", "the halo GEMM");
  // Split taps need clusters (9.0); an unknown target (0) leaves it to the
  // launch.
  CudnnTarget target;
  for (int capability : {0, 90}) {
    target.compute_capability = capability;
    EXPECT_EQ(
        ConfigRejection(EngineSelection(), target, p, ConfigId("direct:e4:k2=32,k6=4,k7=3")), "");
  }
  target.compute_capability = 80;
  EXPECT_EQ(ConfigRejection(EngineSelection(), target, p, ConfigId("direct:e4:k2=32,k6=4,k7=3")),
            "the halo GEMM's split taps need thread-block clusters (compute capability 9.0; "
            "this GPU has 8.0)");
}

// float32 (in TF32): the same tiles where a pixel's channels take twice
// the bytes, so the split starts at 128 channels, and 256 fit with one
// halo buffer only.
TEST(DirectResidentWeightsTest, FloatThreeByThreeLayersHaveTheHaloGemmInTf32) {
  ConvLayerProblem p = ThreeByThree(1);
  p.dtype = DType::kFloat32;
  EXPECT_EQ(DirectHaloRejection(p), "");
  // 64 channels: 9 taps of 32 x 64 float weights, two halos of 6 x 18
  // pixels (rows of 64 floats and 16 bytes), 4 warps' 16 staged rows of 32
  // floats and 16 bytes, 32 float biases. 8 rows of 64 output channels do
  // not fit.
  EXPECT_EQ(DirectHaloSharedBytes(p, 4, 32),
            9 * 32 * 64 * 4 + 2 * 6 * 18 * 272 + 4 * 16 * 144 + 32 * 4);
  EXPECT_GT(DirectHaloSharedBytes(p, 8, 64), kDirectMaxSharedBytes);
  std::vector<std::string> names = DirectConfigNames(p);
  names.erase(std::remove_if(names.begin(), names.end(),
                             [](const std::string& n) { return n.rfind("direct:e4:", 0); }),
              names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"direct:e4:k2=32,k6=4", "direct:e4:k2=64,k6=4",
                                             "direct:e4:k2=32,k6=8"}));
  // 128 channels (3x3 128 @ 28 at batch 1: 14 tiles of 4 rows): split
  // only; the 4-row tiles fit with two halo buffers, 8 rows of 32 output
  // channels with one.
  ConvLayerProblem split = Layer({1, 128, 28, 28}, {128, 128, 3, 3});
  split.dtype = DType::kFloat32;
  EXPECT_EQ(DirectHaloSharedBytes(split, 4, 32, 3),
            3 * 32 * 128 * 4 + 2 * 4 * 18 * 528 + 4 * 16 * 144 + (32 + 128 * 16) * 4 + 16);
  EXPECT_GT(DirectHaloSharedBytes(split, 4, 32), kDirectMaxSharedBytes);
  EXPECT_GT(DirectHaloSharedBytes(split, 8, 32, 3), kDirectMaxSharedBytes);
  names = DirectConfigNames(split);
  names.erase(std::remove_if(names.begin(), names.end(),
                             [](const std::string& n) { return n.rfind("direct:e4:", 0); }),
              names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"direct:e4:k2=32,k6=4,k7=3", "direct:e4:k2=32,k6=8,k7=3,k9=1",
                                      "direct:e4:k2=64,k6=4,k7=3"}));
  EXPECT_EQ(DirectHaloSharedBytes(split, 8, 32, 3, 1),
            3 * 32 * 128 * 4 + 8 * 18 * 528 + 8 * 16 * 144 + (32 + 256 * 16) * 4 + 16);
  // 256 channels: split with one halo buffer, 4 rows of 32 output channels
  // only (190,736 bytes; two buffers would take 265,616).
  ConvLayerProblem wide = Layer({1, 256, 14, 14}, {256, 256, 3, 3});
  wide.dtype = DType::kFloat32;
  EXPECT_EQ(DirectHaloRejection(wide), "");
  EXPECT_GT(DirectHaloSharedBytes(wide, 4, 32, 3), kDirectMaxSharedBytes);
  EXPECT_EQ(DirectHaloSharedBytes(wide, 4, 32, 3, 1),
            3 * 32 * 256 * 4 + 4 * 18 * 1040 + 4 * 16 * 144 + (32 + 128 * 16) * 4 + 16);
  EXPECT_EQ(DirectHaloSharedBytes(wide, 4, 32, 3, 1), 190'736);
  names = DirectConfigNames(wide);
  names.erase(std::remove_if(names.begin(), names.end(),
                             [](const std::string& n) { return n.rfind("direct:e4:", 0); }),
              names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"direct:e4:k2=32,k6=4,k7=3,k9=1"}));
  // --strict_float32 refuses it, as every TF32 engine.
  EngineSelection strict;
  strict.strict_float32 = true;
  CudnnTarget target;
  target.compute_capability = 90;
  EXPECT_EQ(ConfigRejection(strict, target, p, ConfigId("direct:e4:k2=32,k6=4")),
            "the halo GEMM multiplies float32 in TF32 (--strict_float32)");
  EXPECT_EQ(ConfigRejection(EngineSelection(), target, p, ConfigId("direct:e4:k2=32,k6=4")), "");
}

}  // namespace
}  // namespace convserve
