// Engine config ids and the errata rules: parsing (with the line at fault
// named), matching on version, GPU, engine, knobs and layer conditions, and
// the shipped list parses.
#include "engine/cudnn/cudnn_errata.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/test_util/config_id.h"

namespace convserve {
namespace {

ConvLayerProblem DilatedFloat32() {
  ConvLayerProblem p;
  p.dtype = DType::kFloat32;
  p.input = {1, 5, 21, 14};
  p.weights = {48, 5, 7, 5};
  p.output = {1, 48, 13, 5};
  p.stride = {1, 2};
  p.dilation = {2, 2};
  p.pad_before = {3, 1};
  p.pad_after = {1, 2};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kElu;
  return p;
}

TEST(EngineConfigIdTest, RoundTrips) {
  for (const char* text : {"fused:e0:", "unfused:e71:", "unfused_rounding:e46:k2=4,k5=2,k14=3",
                           "direct:e0:k0=2"}) {
    EXPECT_EQ(ConfigId(text).ToString(), text);
  }
  EXPECT_EQ(ConfigId("unfused:e46:k2=4,k14=3").knobs.size(), 2u);
}

TEST(EngineConfigIdTest, MalformedIdsAreRefused) {
  for (const char* text : {"", "fused", "fused:71:", "half:e1:", "fused:e-1:", "fused:e1:k2",
                           "fused:e1:k14=3,k2=4", "fused:e1:k2=1,k2=2", "fused:e1:x2=1"}) {
    EXPECT_FALSE(EngineConfigId::Parse(text).ok()) << text;
  }
}

TEST(CudnnErrataTest, ShippedListParses) {
  absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create("");
  ASSERT_TRUE(errata.ok()) << errata.status();
}

TEST(CudnnErrataTest, ShippedListSkipsEngine71OnStridedChannelsFirstConvsOfCudnn914) {
  absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create("");
  ASSERT_TRUE(errata.ok()) << errata.status();
  const ConvLayerProblem strided = DilatedFloat32();  // stride 1,2: the fault seen
  const ErrataRule* rule = (*errata)->Find(91400, 90, strided, ConfigId("unfused:e71:"));
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->name, "cudnn914-e71-strided-cf");
  EXPECT_EQ((*errata)->Find(91400, 90, strided, ConfigId("unfused:e70:k2=12,k18=0")), nullptr);
  ConvLayerProblem unit_stride = strided;
  unit_stride.stride = {1, 1};
  unit_stride.output = {1, 48, 13, 9};
  EXPECT_EQ((*errata)->Find(91400, 90, unit_stride, ConfigId("unfused:e71:")), nullptr);
  ConvLayerProblem channels_last = strided;
  channels_last.channels_last = true;
  EXPECT_EQ((*errata)->Find(91400, 90, channels_last, ConfigId("unfused:e71:")), nullptr);
}

TEST(CudnnErrataTest, ShippedListSkipsEngine7OnChannelsFirstConvsOfCudnn914) {
  absl::StatusOr<std::shared_ptr<const CudnnErrata>> errata = CudnnErrata::Create("");
  ASSERT_TRUE(errata.ok()) << errata.status();
  // The fault seen (cuda_graph_test seed 6034): grouped, channels-first,
  // bfloat16, output 1x1.
  ConvLayerProblem grouped;
  grouped.dtype = DType::kBFloat16;
  grouped.input = {5, 22, 1, 3};
  grouped.weights = {28, 11, 2, 3};
  grouped.output = {5, 28, 1, 1};
  grouped.stride = {2, 2};
  grouped.dilation = {1, 2};
  grouped.pad_before = {0, 0};
  grouped.pad_after = {2, 2};
  grouped.activation.kind = ActivationKind::kTanh;
  ASSERT_EQ(grouped.groups(), 2);
  const ErrataRule* rule = (*errata)->Find(91400, 90, grouped, ConfigId("fused:e7:k24=29"));
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->name, "cudnn914-e7-cf");
  // Every channels-first conv, any knob and path of engine 7.
  EXPECT_NE((*errata)->Find(91400, 90, DilatedFloat32(), ConfigId("unfused:e7:k24=21")), nullptr);
  EXPECT_EQ((*errata)->Find(91400, 90, grouped, ConfigId("fused:e70:k2=12,k18=0")), nullptr);
  EXPECT_EQ((*errata)->Find(91500, 90, grouped, ConfigId("fused:e7:k24=29")), nullptr);
  ConvLayerProblem channels_last = grouped;
  channels_last.channels_last = true;
  EXPECT_EQ((*errata)->Find(91400, 90, channels_last, ConfigId("fused:e7:k24=29")), nullptr);
}

TEST(CudnnErrataTest, RuleMatchesOnEveryCondition) {
  absl::StatusOr<std::vector<ErrataRule>> rules = CudnnErrata::ParseRules(
      "# comment\n"
      "\n"
      "e71-dilated engine=71 cudnn=9.14.0-9.14.99 cc=80- dtype=float32 layout=cf dilated=1 "
      "path=unfused -- misaligned 16-byte stores\n",
      "test");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 1u);
  const ErrataRule& rule = (*rules)[0];
  EXPECT_EQ(rule.name, "e71-dilated");
  EXPECT_EQ(rule.reason, "misaligned 16-byte stores");
  const ConvLayerProblem p = DilatedFloat32();
  EXPECT_TRUE(rule.Matches(91400, 90, p, ConfigId("unfused:e71:")));
  EXPECT_FALSE(rule.Matches(91500, 90, p, ConfigId("unfused:e71:"))) << "newer cuDNN";
  EXPECT_FALSE(rule.Matches(91400, 75, p, ConfigId("unfused:e71:"))) << "older GPU";
  EXPECT_FALSE(rule.Matches(91400, 90, p, ConfigId("unfused:e70:"))) << "another engine";
  EXPECT_FALSE(rule.Matches(91400, 90, p, ConfigId("fused:e71:"))) << "another path";
  ConvLayerProblem plain = p;
  plain.dilation = {1, 1};
  plain.output = {1, 48, 19, 6};
  EXPECT_FALSE(rule.Matches(91400, 90, plain, ConfigId("unfused:e71:"))) << "not dilated";
  ConvLayerProblem half = p;
  half.dtype = DType::kFloat16;
  EXPECT_FALSE(rule.Matches(91400, 90, half, ConfigId("unfused:e71:"))) << "another dtype";
}

TEST(CudnnErrataTest, KnobsMustAllBePresent) {
  absl::StatusOr<std::vector<ErrataRule>> rules =
      CudnnErrata::ParseRules("r engine=46 knobs=k2=4+k14=3 k=16- -- a knob setting\n", "test");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const ErrataRule& rule = (*rules)[0];
  const ConvLayerProblem p = DilatedFloat32();
  EXPECT_TRUE(rule.Matches(91400, 90, p, ConfigId("unfused:e46:k2=4,k5=2,k14=3")));
  EXPECT_FALSE(rule.Matches(91400, 90, p, ConfigId("unfused:e46:k2=4,k5=2,k14=2")));
  EXPECT_FALSE(rule.Matches(91400, 90, p, ConfigId("unfused:e46:")));
  ConvLayerProblem narrow = p;
  narrow.weights[0] = narrow.output[1] = 8;
  EXPECT_FALSE(rule.Matches(91400, 90, narrow, ConfigId("unfused:e46:k2=4,k5=2,k14=3")))
      << "k < 16";
}

TEST(CudnnErrataTest, MalformedRulesNameTheLine) {
  for (const char* text : {"engine=3 -- no name\n", "r engine=3\n", "r engine=x -- bad\n",
                           "r knobs=k2=1 -- knobs without engine\n", "r cudnn=9.x -- bad\n",
                           "r k=7-3 -- reversed\n", "r colour=red -- unknown\n"}) {
    absl::StatusOr<std::vector<ErrataRule>> rules =
        CudnnErrata::ParseRules(std::string("# header\n") + text, "extra.txt");
    ASSERT_FALSE(rules.ok()) << text;
    EXPECT_NE(rules.status().message().find("extra.txt:2"), std::string::npos)
        << rules.status();
  }
}

TEST(CudnnErrataTest, OperatorFileIsAddedAndAMissingOneIsAnError) {
  EXPECT_FALSE(CudnnErrata::Create("/nonexistent/errata.txt").ok());
}

}  // namespace
}  // namespace convserve
