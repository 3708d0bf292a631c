// ConvLayerProblem's text form: exact round trips (it keys the plan store and
// crosses the pipe to the prober) and refusal of anything inconsistent.
#include "engine/conv_layer_problem.h"

#include <random>
#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

ConvLayerProblem Problem() {
  ConvLayerProblem p;
  p.dtype = DType::kBFloat16;
  p.channels_last = false;
  p.input = {2, 6, 13, 10};
  p.weights = {8, 3, 3, 5};  // groups = 2
  p.output = {2, 8, 6, 5};
  p.stride = {2, 1};
  p.dilation = {1, 2};
  p.pad_before = {1, 2};
  p.pad_after = {0, 1};
  p.has_bias = true;
  p.activation.kind = ActivationKind::kRelu;
  p.activation.has_upper_clip = true;
  p.activation.upper_clip = 6.25f;
  p.activation.negative_slope = 0.1f;
  return p;
}

TEST(ConvLayerProblemTest, EncodeParseRoundTripsExactly) {
  const ConvLayerProblem p = Problem();
  absl::StatusOr<ConvLayerProblem> parsed = ConvLayerProblem::Parse(p.Encode());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Encode(), p.Encode());
  EXPECT_EQ(parsed->activation.negative_slope, p.activation.negative_slope);
  EXPECT_EQ(parsed->groups(), 2);
  EXPECT_EQ(p.Encode().find(' '), std::string::npos);
}

TEST(ConvLayerProblemTest, RandomFloatParametersRoundTripBitForBit) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-10.0f, 10.0f);
  for (int i = 0; i < 200; ++i) {
    ConvLayerProblem p = Problem();
    p.activation.kind = ActivationKind::kSwish;
    p.activation.beta = value(rng);
    p.activation.alpha = value(rng);
    absl::StatusOr<ConvLayerProblem> parsed = ConvLayerProblem::Parse(p.Encode());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->activation.beta, p.activation.beta);
    EXPECT_EQ(parsed->activation.alpha, p.activation.alpha);
  }
}

TEST(ConvLayerProblemTest, ThreeDimensionalProblemRoundTrips) {
  ConvLayerProblem p;
  p.dtype = DType::kFloat16;
  p.channels_last = true;
  p.input = {1, 4, 5, 6, 7};
  p.weights = {4, 1, 3, 3, 3};  // depthwise
  p.output = {1, 4, 3, 4, 5};
  p.stride = p.dilation = {1, 1, 1};
  p.pad_before = p.pad_after = {0, 0, 0};
  absl::StatusOr<ConvLayerProblem> parsed = ConvLayerProblem::Parse(p.Encode());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, p);
}

struct BadText {
  const char* name;
  const char* from;
  const char* to;
  const char* field;  // named in the error
};

class ConvLayerProblemParseTest : public ::testing::TestWithParam<BadText> {};

TEST_P(ConvLayerProblemParseTest, InconsistentTextIsRefused) {
  const std::string text =
      absl::StrReplaceAll(Problem().Encode(), {{GetParam().from, GetParam().to}});
  ASSERT_NE(text, Problem().Encode()) << "the replacement did not apply";
  absl::StatusOr<ConvLayerProblem> parsed = ConvLayerProblem::Parse(text);
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
  EXPECT_NE(parsed.status().message().find(GetParam().field), std::string::npos)
      << parsed.status();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ConvLayerProblemParseTest,
    ::testing::Values(BadText{"UnknownDtype", "dtype=bfloat16", "dtype=int8", "dtype"},
                      BadText{"UnknownLayout", "layout=cf", "layout=xx", "layout"},
                      BadText{"OutputDoesNotFollow", "y=2,8,6,5", "y=2,8,6,6", "'y'"},
                      BadText{"BatchDiffers", "y=2,8,6,5", "y=3,8,6,5", "x/w/y"},
                      BadText{"GroupsDoNotDivide", "w=8,3,3,5", "w=8,4,3,5", "x/w/y"},
                      BadText{"RankMismatch", "stride=2,1", "stride=2,1,1", "x/w/y"},
                      BadText{"NegativePad", "pad_before=1,2", "pad_before=-1,2",
                              "stride/dilation/pads"},
                      BadText{"NotANumber", "x=2,6,13,10", "x=2,six,13,10", "'x'"},
                      BadText{"InfiniteClip", "clip=6.25", "clip=inf", "clip"},
                      BadText{"MissingField", ";bias=1", "", "bias"},
                      BadText{"UnknownActivation", "act=relu", "act=mish", "act"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ConvLayerProblemTest, EmptyAndGarbageTextAreRefused) {
  EXPECT_FALSE(ConvLayerProblem::Parse("").ok());
  EXPECT_FALSE(ConvLayerProblem::Parse(";;;").ok());
  EXPECT_FALSE(ConvLayerProblem::Parse(Problem().Encode() + ";extra=1").ok());
  EXPECT_FALSE(ConvLayerProblem::Parse(Problem().Encode() + ";dtype=float32").ok());
}

}  // namespace
}  // namespace convserve
