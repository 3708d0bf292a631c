// Which layers and configurations the direct path has (direct_conv.h): the
// depthwise kernel, the implicit GEMM and the narrow GEMM (the pointwise
// and halo GEMMs: direct_resident_weights_test.cc), and how the selection
// filters treat it: --direct_kernels, the cuDNN engine blocklist (which
// does not apply to our engine numbers) and errata rules (which apply only
// when they name the path). No GPU needed.
#include "engine/cudnn/direct_conv.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/cudnn/cudnn_errata.h"
#include "engine/cudnn/engine_selection.h"
#include "engine/cudnn/fast_divisor.h"
#include "gtest/gtest.h"
#include "tests/test_util/config_id.h"

namespace convserve {
namespace {

// MobileNetV2's depthwise 3x3 on 144 channels at 56x56, float16 NHWC.
ConvLayerProblem Depthwise() {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.channels_last = true;
  p.input = {32, 144, 56, 56};
  p.weights = {144, 1, 3, 3};
  p.output = {32, 144, 56, 56};
  p.stride = {1, 1};
  p.dilation = {1, 1};
  p.pad_before = {1, 1};
  p.pad_after = {1, 1};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  return p;
}

TEST(DirectConvTest, DepthwiseLayersHaveTheirConfigurations) {
  const ConvLayerProblem p = Depthwise();
  EXPECT_TRUE(DirectPathApplies(p));
  EXPECT_EQ(DirectConvRejection(p), "");
  EXPECT_EQ(DirectConfigNames(p),
            (std::vector<std::string>{"direct:e0:k0=2,k1=16", "direct:e0:k0=1,k1=16",
                                      "direct:e0:k0=4,k1=16", "direct:e0:k0=2,k1=8",
                                      "direct:e0:k0=1,k1=8", "direct:e0:k0=4,k1=8"}));
  // Channels-first layers have no vector knob.
  ConvLayerProblem channels_first = p;
  channels_first.channels_last = false;
  EXPECT_EQ(DirectConfigNames(channels_first),
            (std::vector<std::string>{"direct:e0:k0=2", "direct:e0:k0=1", "direct:e0:k0=4"}));
  EXPECT_NE(DirectConfigRejection(channels_first, ConfigId("direct:e0:k0=2,k1=16")), "");
}

TEST(DirectConvTest, OtherLayersAreRefusedWithTheReason) {
  // A dense layer goes to the implicit GEMM, which needs C % 32 == 0.
  ConvLayerProblem dense = Depthwise();
  dense.weights = {144, 144, 3, 3};
  EXPECT_TRUE(DirectPathApplies(dense));
  EXPECT_NE(DirectConvRejection(dense).find("multiple of 32 (have 144)"), std::string::npos)
      << DirectConvRejection(dense);
  EXPECT_TRUE(DirectConvConfigs(dense).empty());

  ConvLayerProblem grouped = Depthwise();  // groups == 2
  grouped.weights = {144, 72, 3, 3};
  EXPECT_FALSE(DirectPathApplies(grouped));
  EXPECT_NE(DirectConvRejection(grouped).find("depthwise"), std::string::npos);

  ConvLayerProblem multiplier = Depthwise();  // groups == C, K = 2C
  multiplier.weights = {288, 1, 3, 3};
  multiplier.output = {32, 288, 56, 56};
  EXPECT_FALSE(DirectPathApplies(multiplier));

  ConvLayerProblem three_d = Depthwise();
  three_d.input = {1, 8, 5, 5, 5};
  three_d.weights = {8, 1, 3, 3, 3};
  three_d.output = {1, 8, 5, 5, 5};
  EXPECT_FALSE(DirectPathApplies(three_d));

  ConvLayerProblem wide = Depthwise();  // 17 x 17 = 289 taps
  wide.weights = {144, 1, 17, 17};
  EXPECT_TRUE(DirectPathApplies(wide));
  EXPECT_NE(DirectConvRejection(wide).find("289 taps"), std::string::npos);
  EXPECT_TRUE(DirectConvConfigs(wide).empty());
}

// ResNet-50's last 3x3 layer at batch 1: 512 -> 512 channels at 7x7,
// float16 NHWC.
ConvLayerProblem Dense() {
  ConvLayerProblem p = Depthwise();
  p.input = {1, 512, 7, 7};
  p.weights = {512, 512, 3, 3};
  p.output = {1, 512, 7, 7};
  return p;
}

// ResNet-50's stem at batch 32: 7x7 stride 2 on 3 channels, 224x224 ->
// 112x112x64, float16 NHWC.
ConvLayerProblem Stem() {
  ConvLayerProblem p = Depthwise();
  p.input = {32, 3, 224, 224};
  p.weights = {64, 3, 7, 7};
  p.output = {32, 64, 112, 112};
  p.stride = {2, 2};
  p.pad_before = p.pad_after = {3, 3};
  return p;
}

TEST(DirectConvTest, DenseLayersHaveTheImplicitGemmConfigurations) {
  const ConvLayerProblem p = Dense();
  EXPECT_TRUE(DirectPathApplies(p));
  EXPECT_EQ(DirectConvRejection(p), "");
  // One pixel tile; 8 or 16 channel tiles; ordered by how near the block
  // count comes to 132 (128, 64, 64, 32, 32, 16, 16, 8 blocks).
  EXPECT_EQ(DirectConfigNames(p), (std::vector<std::string>{
                       "direct:e1:k2=32,k3=8", "direct:e1:k2=64,k3=8", "direct:e1:k2=32,k3=4",
                       "direct:e1:k2=64,k3=4", "direct:e1:k2=32,k3=2", "direct:e1:k2=64,k3=2",
                       "direct:e1:k2=32,k3=1", "direct:e1:k2=64,k3=1"}));

  // float32 (TF32) has the same configurations; its steps are 16 channels.
  ConvLayerProblem f32 = p;
  f32.dtype = DType::kFloat32;
  EXPECT_EQ(DirectGemmChunk(DType::kFloat32), 16);
  EXPECT_EQ(DirectGemmChunk(DType::kFloat16), 32);
  EXPECT_EQ(DirectGemmChunk(DType::kBFloat16), 32);
  EXPECT_EQ(DirectConfigNames(f32), DirectConfigNames(p));

  // A reduction of one step (a 1x1 conv on 32 channels) is not split.
  ConvLayerProblem narrow = p;
  narrow.input = {1, 32, 7, 7};
  narrow.weights = {512, 32, 1, 1};
  narrow.pad_before = narrow.pad_after = {0, 0};
  // (The pointwise GEMM too: 1 tile, in 8 or 4 slices of the outputs or 1.)
  EXPECT_EQ(DirectConfigNames(narrow),
            (std::vector<std::string>{
                "direct:e1:k2=32,k3=1", "direct:e1:k2=64,k3=1", "direct:e3:k2=64,k5=2",
                "direct:e3:k2=64,k5=1", "direct:e3:k2=128,k5=2", "direct:e3:k2=128,k5=1",
                "direct:e3:k5=2", "direct:e3:k5=1"}));
  // In float32 the same layer is two steps, so it splits in two; the
  // pointwise GEMM (TF32) has the same slices, all two blocks an SM.
  narrow.dtype = DType::kFloat32;
  EXPECT_EQ(DirectConfigNames(narrow),
            (std::vector<std::string>{
                "direct:e1:k2=32,k3=2", "direct:e1:k2=64,k3=2", "direct:e1:k2=32,k3=1",
                "direct:e1:k2=64,k3=1", "direct:e3:k2=64,k5=2", "direct:e3:k2=64,k5=1",
                "direct:e3:k2=128,k5=2", "direct:e3:k2=128,k5=1", "direct:e3:k5=2",
                "direct:e3:k5=1"}));
}

TEST(DirectConvTest, TheImplicitGemmRefusesWhatItDoesNotRun) {
  const auto rejection = [](ConvLayerProblem p) {
    EXPECT_TRUE(DirectConvConfigs(p).empty());
    return DirectConvRejection(p);
  };
  ConvLayerProblem p = Dense();
  p.channels_last = false;
  EXPECT_NE(rejection(p).find("channels-last"), std::string::npos);
  p = Dense();
  p.input[1] = 48;
  p.weights[1] = 48;
  EXPECT_NE(rejection(p).find("float16 input channels a multiple of 32 (have 48)"),
            std::string::npos);
  // float32's steps are 16 channels (64 bytes).
  p.dtype = DType::kFloat32;
  EXPECT_EQ(DirectConvRejection(p), "");
  p.input[1] = 40;
  p.weights[1] = 40;
  EXPECT_NE(rejection(p).find("float32 input channels a multiple of 16 (have 40)"),
            std::string::npos);
  p = Dense();
  p.output[1] = 12;
  p.weights[0] = 12;
  EXPECT_NE(rejection(p).find("output channels a multiple of 8 (have 12)"), std::string::npos);
  p = Dense();
  p.input = {1, 512, 1 << 15, 1 << 15};
  EXPECT_NE(rejection(p).find("elements"), std::string::npos);

  const ConvLayerProblem dense = Dense();
  EXPECT_NE(DirectConfigRejection(dense, ConfigId("direct:e1:k2=48,k3=1")), "");
  EXPECT_NE(DirectConfigRejection(dense, ConfigId("direct:e1:k2=64,k3=16")), "");
  EXPECT_NE(DirectConfigRejection(dense, ConfigId("direct:e0:k0=2,k1=16")), "");
  EXPECT_NE(DirectConfigRejection(Depthwise(), ConfigId("direct:e1:k2=64,k3=1")), "");
}

// Thread-block clusters: compute capability 9.0. An unknown target (0)
// leaves the check to the launch.
TEST(DirectConvTest, TheImplicitGemmNeedsClusters) {
  const ConvLayerProblem p = Dense();
  const EngineSelection selection;
  CudnnTarget target;
  target.compute_capability = 80;
  EXPECT_NE(ConfigRejection(selection, target, p, ConfigId("direct:e1:k2=64,k3=1"))
                .find("compute capability 9.0; this GPU has 8.0"),
            std::string::npos);
  EXPECT_EQ(ConfigRejection(selection, target, Depthwise(), ConfigId("direct:e0:k0=2,k1=16")),
            "");
  for (int capability : {0, 90, 100}) {
    target.compute_capability = capability;
    EXPECT_EQ(ConfigRejection(selection, target, p, ConfigId("direct:e1:k2=64,k3=1")), "");
  }
  // The narrow GEMM needs mma.sync only (8.0).
  const ConvLayerProblem stem = Stem();
  target.compute_capability = 80;
  EXPECT_EQ(ConfigRejection(selection, target, stem, ConfigId("direct:e2:k4=64")), "");
  target.compute_capability = 75;
  EXPECT_NE(ConfigRejection(selection, target, stem, ConfigId("direct:e2:k4=64"))
                .find("compute capability 8.0; this GPU has 7.5"),
            std::string::npos);
}

// The GEMMs multiply float32 in TF32: --strict_float32 refuses them there,
// and only there (the depthwise engine computes in float32).
TEST(DirectConvTest, StrictFloat32RefusesTheTf32Gemm) {
  EngineSelection selection;
  selection.strict_float32 = true;
  const CudnnTarget target;
  const EngineConfigId gemm = ConfigId("direct:e1:k2=64,k3=1");
  const EngineConfigId narrow = ConfigId("direct:e2:k4=64");
  for (const auto& [layer, id] : {std::pair{Dense(), gemm}, std::pair{Stem(), narrow}}) {
    ConvLayerProblem p = layer;
    EXPECT_EQ(ConfigRejection(selection, target, p, id), "") << id.ToString();
    p.dtype = DType::kFloat32;
    EXPECT_NE(ConfigRejection(selection, target, p, id).find("TF32 (--strict_float32)"),
              std::string::npos)
        << id.ToString();
  }
  ConvLayerProblem p = Dense();
  p.dtype = DType::kFloat32;
  ConvLayerProblem depthwise = Depthwise();
  depthwise.dtype = DType::kFloat32;
  EXPECT_EQ(ConfigRejection(selection, target, depthwise, ConfigId("direct:e0:k0=2,k1=16")), "");
  selection.strict_float32 = false;
  EXPECT_EQ(ConfigRejection(selection, target, p, gemm), "");
}

TEST(DirectConvTest, ShortKernelRowsHaveTheNarrowGemm) {
  ConvLayerProblem p = Stem();
  EXPECT_TRUE(DirectPathApplies(p));
  EXPECT_EQ(DirectConvRejection(p), "");
  // 112 rows of 32 images: 3584 or 7168 tiles, the fewest first; the
  // 128-pixel tile also in warps of 16 pixels.
  EXPECT_EQ(DirectConfigNames(p), (std::vector<std::string>{"direct:e2:k4=128",
                                                            "direct:e2:k4=128,k8=16",
                                                            "direct:e2:k4=64"}));
  // A kernel row reads 21 elements: three groups of 8 float16, 21 groups in
  // 11 steps; pixels 6 elements apart.
  DirectNarrowLayout l = DirectNarrowLayoutOf(p, 128);
  EXPECT_EQ(l.row, 21);
  EXPECT_EQ(l.groups, 3);
  EXPECT_EQ(l.steps, 11);
  EXPECT_EQ(l.pixel_step, 6);
  EXPECT_EQ(l.weight_stride, 23 * 8);
  EXPECT_EQ(l.input_stride, 127 * 6 + 24 + 6);  // rounded up to a group
  EXPECT_EQ(l.span, 7);
  EXPECT_EQ(l.shared_bytes, (64 * 184 + 2 * 7 * 792) * 2 + 11 * 16);
  // float32: groups of 4, six a kernel row, 42 in 21 steps.
  p.dtype = DType::kFloat32;
  l = DirectNarrowLayoutOf(p, 64);
  EXPECT_EQ(l.groups, 6);
  EXPECT_EQ(l.steps, 21);
  EXPECT_EQ(l.weight_stride, 43 * 4);
  EXPECT_EQ(l.input_stride, 63 * 6 + 24 + 2);
  // Dilation along H widens the rows a tile reads, not the reduction.
  p.dilation = {2, 1};
  EXPECT_EQ(DirectNarrowLayoutOf(p, 64).span, 13);
  EXPECT_EQ(DirectNarrowLayoutOf(p, 64).steps, 21);
  p.dilation = {1, 1};
  EXPECT_EQ(DirectConfigNames(p), DirectConfigNames(Stem()));

  // At batch 1 (112 output rows), 128-pixel tiles come nearest 132 blocks.
  p = Stem();
  p.input[0] = p.output[0] = 1;
  EXPECT_EQ(DirectConfigNames(p).front(), "direct:e2:k4=128");
  // A layer the implicit GEMM runs is not the narrow GEMM's: 1x1 on 32
  // channels (a row of 32 elements).
  ConvLayerProblem gemm = Dense();
  gemm.input = {1, 32, 7, 7};
  gemm.weights = {512, 32, 1, 1};
  gemm.pad_before = gemm.pad_after = {0, 0};
  for (const EngineConfigId& id : DirectConvConfigs(gemm)) {
    EXPECT_NE(id.engine, kDirectNarrowEngine) << id.ToString();
  }
  EXPECT_NE(DirectConfigRejection(gemm, ConfigId("direct:e2:k4=128")), "");
  // Its kernel rows may be up to 48 elements: 3x3 on 16 channels in float16,
  // or a 1x1 on 48.
  p = Stem();
  p.input[1] = p.weights[1] = 16;
  p.weights[2] = p.weights[3] = 3;
  EXPECT_EQ(DirectConvRejection(p), "");
  EXPECT_EQ(DirectConvConfigs(p).front().engine, kDirectNarrowEngine);
}

TEST(DirectConvTest, TheNarrowGemmRefusesWhatItDoesNotRun) {
  const auto rejection = [](ConvLayerProblem p) {
    EXPECT_TRUE(DirectConvConfigs(p).empty());
    return DirectConvRejection(p);
  };
  ConvLayerProblem p = Stem();
  p.weights[3] = 17;  // rows of 51
  EXPECT_NE(rejection(p).find("kernel rows (S*C) of at most 48 elements (have 51)"),
            std::string::npos)
      << DirectConvRejection(p);
  // Both engines' reasons are given.
  EXPECT_NE(DirectConvRejection(p).find("multiple of 32 (have 3)"), std::string::npos);
  p = Stem();
  p.dilation = {1, 2};
  EXPECT_NE(rejection(p).find("dilation 1 along W"), std::string::npos);
  p = Stem();
  p.dilation = {2, 1};  // along H it is free
  EXPECT_EQ(DirectConvRejection(p), "");
  p = Stem();
  p.channels_last = false;
  EXPECT_NE(rejection(p).find("narrow GEMM runs channels-last"), std::string::npos);
  p = Stem();
  p.output[1] = p.weights[0] = 60;
  EXPECT_NE(rejection(p).find("output channels a multiple of 8 (have 60)"), std::string::npos);
  // Very tall kernels do not fit shared memory (their weights are kept whole).
  p = Stem();
  p.input[1] = p.weights[1] = 1;
  p.weights[2] = 1000;
  p.input[2] = 1200;
  p.output[2] = 1;
  EXPECT_NE(rejection(p).find("bytes of shared memory"), std::string::npos);
  EXPECT_NE(DirectConfigRejection(Stem(), ConfigId("direct:e2:k4=256")), "");
  EXPECT_NE(DirectConfigRejection(Stem(), ConfigId("direct:e2:k4=32")), "");
  EXPECT_NE(DirectConfigRejection(Stem(), ConfigId("direct:e2:k4=64,k8=16")), "");
  EXPECT_NE(DirectConfigRejection(Stem(), ConfigId("direct:e2:k4=128,k8=8")), "");
  EXPECT_NE(DirectConfigRejection(Stem(), ConfigId("direct:e1:k2=64,k3=1")), "");
}

TEST(DirectConvTest, UnknownConfigurationsAreRefused) {
  const ConvLayerProblem p = Depthwise();
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e0:k0=3,k1=16")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e0:k0=2,k1=4")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e0:k0=2")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e1:k0=2,k1=16")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("direct:e0:")), "");
  EXPECT_NE(DirectConfigRejection(p, ConfigId("fused:e0:k0=2,k1=16")), "");
}

TEST(DirectConvTest, SelectionFiltersTreatTheDirectPathAsOurs) {
  const ConvLayerProblem p = Depthwise();
  const CudnnTarget target;
  EngineSelection selection;
  EXPECT_EQ(ConfigRejection(selection, target, p, ConfigId("direct:e0:k0=2,k1=16")), "");
  // The blocklist holds cuDNN engine numbers: engine 0 there is not ours.
  selection.blocklist = {0};
  EXPECT_EQ(ConfigRejection(selection, target, p, ConfigId("direct:e0:k0=2,k1=16")), "");
  EXPECT_NE(ConfigRejection(selection, target, p, ConfigId("fused:e0:")), "");
  selection.blocklist.clear();
  selection.direct_kernels = false;
  EXPECT_NE(ConfigRejection(selection, target, p, ConfigId("direct:e0:k0=2,k1=16"))
                .find("--direct_kernels"),
            std::string::npos);
  EXPECT_EQ(ConfigRejection(selection, target, p, ConfigId("fused:e0:")), "");
  // Autotune races it on every dtype, and it rounds once: no margin.
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    ConvLayerProblem typed = p;
    typed.dtype = dtype;
    EXPECT_TRUE(AutotuneAlsoTries(typed, LayerPath::kDirect));
  }
  EXPECT_LT(AutotuneRankMs(0.99f, LayerPath::kDirect),
            AutotuneRankMs(1.0f, LayerPath::kUnfusedRounding));
  EXPECT_LT(AutotuneRankMs(0.99f, LayerPath::kDirect), AutotuneRankMs(1.0f, LayerPath::kFused));
}

TEST(DirectConvTest, ErrataRulesMatchTheDirectPathOnlyWhenTheyNameIt) {
  absl::StatusOr<std::vector<ErrataRule>> rules = CudnnErrata::ParseRules(
      "cudnn-e0 engine=0 -- a cuDNN engine 0 defect\n"
      "ours engine=0 path=direct knobs=k0=4 -- a defect of our 4-column kernels\n",
      "test");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  const ConvLayerProblem p = Depthwise();
  EXPECT_TRUE((*rules)[0].Matches(91400, 90, p, ConfigId("fused:e0:")));
  EXPECT_FALSE((*rules)[0].Matches(91400, 90, p, ConfigId("direct:e0:k0=2,k1=16")));
  EXPECT_TRUE((*rules)[1].Matches(91400, 90, p, ConfigId("direct:e0:k0=4,k1=8")));
  EXPECT_FALSE((*rules)[1].Matches(91400, 90, p, ConfigId("direct:e0:k0=2,k1=8")));
}

// The implicit GEMM's divisions by layer sizes (the same code runs on the
// device): every divisor up to 4096 against small numerators and the ends
// of the range, then divisors up to 2^31 - 1 against random numerators.
TEST(FastDivisorTest, DividesLikeIntegerDivision) {
  constexpr int kMax = 2147483647;
  std::mt19937_64 rng(20261127);
  const auto check = [](const FastDivisor& f, int n) {
    const int q = f.Divide(n);
    ASSERT_EQ(q, n / f.divisor) << n << " / " << f.divisor;
    ASSERT_EQ(f.Remainder(n, q), n % f.divisor) << n << " % " << f.divisor;
  };
  for (int d = 1; d <= 4096; ++d) {
    const FastDivisor f = FastDivisor::Of(d);
    for (int n = 0; n < 3 * d + 70; ++n) check(f, n);
    for (int n = kMax - 3 * d; n < kMax; ++n) check(f, n);
    check(f, kMax);
    for (int i = 0; i < 64; ++i) check(f, static_cast<int>(rng() % (int64_t{kMax} + 1)));
  }
  std::vector<int> divisors = {4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1,
                               123456789, 1 << 30, (1 << 30) + 1, kMax - 1, kMax};
  for (int i = 0; i < 2000; ++i) divisors.push_back(1 + static_cast<int>(rng() % kMax));
  for (int d : divisors) {
    const FastDivisor f = FastDivisor::Of(d);
    for (int n : {0, 1, d - 1, d, kMax - 1, kMax}) check(f, n);
    for (int i = 0; i < 500; ++i) check(f, static_cast<int>(rng() % (int64_t{kMax} + 1)));
  }
}

}  // namespace
}  // namespace convserve
