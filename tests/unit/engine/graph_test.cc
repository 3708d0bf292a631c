#include "engine/graph.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// `count` float32 values 0.25, 0.5, ... as the bytes of a weights/bias field.
std::string Float32Bytes(int64_t count) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = 0.25f * static_cast<float>(i % 7 + 1);
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

ConvLayerSpec Layer(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel,
                    int64_t groups = 1) {
  ConvLayerSpec layer;
  layer.out_channels = out_channels;
  layer.kernel_size = kernel;
  layer.groups = groups;
  int64_t count = out_channels * (in_channels / (groups == 0 ? 1 : groups));
  for (int64_t k : kernel) count *= k;
  layer.weights = Float32Bytes(count);
  layer.bias = Float32Bytes(out_channels);
  return layer;
}

// A valid float32 NCHW graph: 3 -> 4 (3x3) -> 4 (1x1, groups 2) channels.
GraphSpec TwoLayerSpec() {
  GraphSpec spec;
  spec.name = "two_layer.v1";
  spec.input_channels = 3;
  spec.layers.push_back(Layer(3, 4, {3, 3}));
  spec.layers.back().activation.kind = ActivationKind::kRelu;
  spec.layers.push_back(Layer(4, 4, {1, 1}, 2));
  spec.layers.back().activation.kind = ActivationKind::kElu;
  spec.layers.back().activation.alpha = 0.5f;
  return spec;
}

std::shared_ptr<const Graph> CreateOrDie(GraphSpec spec, const GraphLimits& limits = {}) {
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(std::move(spec), limits);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : nullptr;
}

TEST(GraphTest, CreateAcceptsValidGraphAndFillsDefaults) {
  GraphSpec spec = TwoLayerSpec();
  spec.layers[0].groups = 0;  // read as 1
  std::shared_ptr<const Graph> graph = CreateOrDie(spec);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->name(), "two_layer.v1");
  EXPECT_EQ(graph->spatial_rank(), 2);
  EXPECT_EQ(graph->spec().spatial_rank, 2);
  const ConvLayerSpec& first = graph->spec().layers[0];
  EXPECT_THAT(first.stride, ElementsAre(1, 1));
  EXPECT_THAT(first.dilation, ElementsAre(1, 1));
  EXPECT_THAT(first.pad_before, ElementsAre(0, 0));
  EXPECT_THAT(first.pad_after, ElementsAre(0, 0));
  EXPECT_EQ(first.groups, 1);
  EXPECT_EQ(graph->parameter_bytes(), (4 * 3 * 9 + 4 + 4 * 2 + 4) * 4);
  EXPECT_EQ(graph->LayerInputChannels(0), 3);
  EXPECT_EQ(graph->LayerInputChannels(1), 4);
  EXPECT_THAT(graph->WeightShape(0), ElementsAre(4, 3, 3, 3));
  EXPECT_THAT(graph->WeightShape(1), ElementsAre(4, 2, 1, 1));
  EXPECT_THAT(graph->id(), MatchesRegex("[0-9a-f]{32}"));
}

TEST(GraphTest, CreateFillsSpatialRankFromThreeDLayout) {
  GraphSpec spec;
  spec.name = "volume";
  spec.dtype = DType::kFloat16;
  spec.layout = Layout::kNDHWC;
  spec.input_channels = 2;
  ConvLayerSpec layer;
  layer.out_channels = 3;
  layer.kernel_size = {1, 2, 3};
  layer.weights = std::string(3 * 2 * 6 * 2, '\0');  // float16 zeros
  spec.layers.push_back(layer);
  std::shared_ptr<const Graph> graph = CreateOrDie(spec);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->spatial_rank(), 3);
  EXPECT_THAT(graph->spec().layers[0].stride, ElementsAre(1, 1, 1));
  EXPECT_TRUE(graph->spec().layers[0].bias.empty());
  EXPECT_THAT(graph->WeightShape(0), ElementsAre(3, 2, 1, 2, 3));
  EXPECT_EQ(graph->parameter_bytes(), 72);
}

// Turns the valid TwoLayerSpec() into the spec under test.
using SpecEdit = std::function<void(GraphSpec*)>;

struct BadSpecCase {
  std::string test_name;
  // Field the message must start with.
  std::string field;
  SpecEdit mutate;
  GraphLimits limits;
};

void PrintTo(const BadSpecCase& c, std::ostream* os) { *os << c.test_name; }

class GraphRejectsBadSpecTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(GraphRejectsBadSpecTest, InvalidArgumentNamesField) {
  GraphSpec spec = TwoLayerSpec();
  GetParam().mutate(&spec);
  absl::StatusOr<std::shared_ptr<const Graph>> graph =
      Graph::Create(std::move(spec), GetParam().limits);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_THAT(std::string(graph.status().message()), StartsWith(GetParam().field + " "));
}

std::vector<BadSpecCase> BadSpecCases() {
  GraphLimits short_names;
  short_names.max_name_length = 8;
  GraphLimits one_layer;
  one_layer.max_layers = 1;
  GraphLimits small_kernels;
  small_kernels.max_kernel_size = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<BadSpecCase> cases;
  const auto add = [&cases](std::string test_name, std::string field, SpecEdit mutate,
                            GraphLimits limits = {}) {
    cases.push_back({std::move(test_name), std::move(field), std::move(mutate), limits});
  };
  add("EmptyName", "name", [](GraphSpec* s) { s->name.clear(); });
  add("NameWithSpace", "name", [](GraphSpec* s) { s->name = "my graph"; });
  add("NameWithSlash", "name", [](GraphSpec* s) { s->name = "a/b"; });
  add(
      "NameTooLong", "name", [](GraphSpec* s) { s->name = "ninechars"; }, short_names);
  add("SpatialRankDisagreesWithLayout", "spatial_rank", [](GraphSpec* s) { s->spatial_rank = 3; });
  add("ZeroInputChannels", "input_channels", [](GraphSpec* s) { s->input_channels = 0; });
  add("NoLayers", "layers", [](GraphSpec* s) { s->layers.clear(); });
  add(
      "TooManyLayers", "layers", [](GraphSpec*) {}, one_layer);
  add("ZeroOutChannels", "layers[1].out_channels",
      [](GraphSpec* s) { s->layers[1].out_channels = 0; });
  add("MissingKernelSize", "layers[0].kernel_size",
      [](GraphSpec* s) { s->layers[0].kernel_size.clear(); });
  add("KernelSizeWrongRank", "layers[0].kernel_size", [](GraphSpec* s) {
    s->layers[0].kernel_size = {3, 3, 1};
  });
  add(
      "KernelBeyondLimit", "layers[0].kernel_size[0]", [](GraphSpec*) {}, small_kernels);
  add("ZeroStride", "layers[0].stride[1]", [](GraphSpec* s) { s->layers[0].stride = {1, 0}; });
  add("StrideWrongRank", "layers[0].stride", [](GraphSpec* s) { s->layers[0].stride = {2}; });
  add("ZeroDilation", "layers[1].dilation[0]", [](GraphSpec* s) {
    s->layers[1].dilation = {0, 1};
  });
  add("NegativePadBefore", "layers[0].pad_before[0]", [](GraphSpec* s) {
    s->layers[0].pad_before = {-1, 0};
  });
  add("PadAfterBeyondLimit", "layers[0].pad_after[1]", [](GraphSpec* s) {
    s->layers[0].pad_after = {0, 257};
  });
  add("NegativeGroups", "layers[1].groups", [](GraphSpec* s) { s->layers[1].groups = -2; });
  add("GroupsAboveInputChannels", "layers[0].groups",
      [](GraphSpec* s) { s->layers[0].groups = 4; });
  add("GroupsNotDividingInputChannels", "layers[1].groups",
      [](GraphSpec* s) { s->layers[1].groups = 3; });
  add("GroupsNotDividingOutChannels", "layers[0].groups", [](GraphSpec* s) {
    s->layers[0] = Layer(3, 4, {3, 3}, 3);
  });
  add("WeightsOneByteShort", "layers[1].weights",
      [](GraphSpec* s) { s->layers[1].weights.pop_back(); });
  add("WeightsForUngroupedConv", "layers[1].weights",
      [](GraphSpec* s) { s->layers[1].weights = Float32Bytes(4 * 4); });
  add("WeightsHoldNaN", "layers[1].weights", [nan](GraphSpec* s) {
    s->layers[1].weights.replace(4, 4, reinterpret_cast<const char*>(&nan), 4);
  });
  add("BiasWrongSize", "layers[0].bias", [](GraphSpec* s) { s->layers[0].bias = Float32Bytes(3); });
  add("BiasHoldsInfinity", "layers[0].bias", [inf](GraphSpec* s) {
    s->layers[0].bias.replace(0, 4, reinterpret_cast<const char*>(&inf), 4);
  });
  add("ReluClipNotPositive", "layers[0].activation.upper_clip", [](GraphSpec* s) {
    s->layers[0].activation.has_upper_clip = true;
    s->layers[0].activation.upper_clip = 0.0f;
  });
  add("ReluSlopeNotFinite", "layers[0].activation.negative_slope",
      [inf](GraphSpec* s) { s->layers[0].activation.negative_slope = inf; });
  add("SlopeOnTanh", "layers[0].activation", [](GraphSpec* s) {
    s->layers[0].activation.kind = ActivationKind::kTanh;
    s->layers[0].activation.negative_slope = 0.1f;
  });
  add("EluAlphaNaN", "layers[1].activation.alpha",
      [nan](GraphSpec* s) { s->layers[1].activation.alpha = nan; });
  add("SoftplusBetaZero", "layers[1].activation.beta", [](GraphSpec* s) {
    s->layers[1].activation.kind = ActivationKind::kSoftplus;
    s->layers[1].activation.beta = 0.0f;
  });
  add("SwishBetaInfinite", "layers[1].activation.beta", [inf](GraphSpec* s) {
    s->layers[1].activation.kind = ActivationKind::kSwish;
    s->layers[1].activation.beta = inf;
  });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Specs, GraphRejectsBadSpecTest, ::testing::ValuesIn(BadSpecCases()),
                         [](const ::testing::TestParamInfo<BadSpecCase>& info) {
                           return info.param.test_name;
                         });

TEST(GraphTest, CreateRejectsParametersBeyondLimit) {
  const GraphSpec spec = TwoLayerSpec();
  const int64_t bytes = (4 * 3 * 9 + 4 + 4 * 2 + 4) * 4;
  GraphLimits limits;
  limits.max_parameter_bytes = bytes - 1;  // each layer alone fits; the sum does not
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(spec, limits);
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kResourceExhausted) << graph.status();
  limits.max_parameter_bytes = bytes;
  EXPECT_TRUE(Graph::Create(spec, limits).ok());
}

TEST(GraphTest, InferShapesRejectsTensorsBeyondLimit) {
  GraphSpec spec;
  spec.name = "widen";
  spec.input_channels = 1;
  spec.layers.push_back(Layer(1, 16, {1, 1}));
  GraphLimits limits;
  limits.max_tensor_bytes = 4 * 1000;
  std::shared_ptr<const Graph> graph = CreateOrDie(spec, limits);
  ASSERT_NE(graph, nullptr);
  // Input 400 bytes fits; the 16-channel output (6400 bytes) does not.
  absl::StatusOr<std::vector<Shape>> shapes = graph->InferShapes({1, 1, 10, 10});
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kResourceExhausted) << shapes.status();
  EXPECT_THAT(std::string(shapes.status().message()), HasSubstr("layers[0] output"));
  // The input itself too large.
  shapes = graph->InferShapes({1, 1, 40, 40});
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kResourceExhausted) << shapes.status();
  EXPECT_THAT(std::string(shapes.status().message()), HasSubstr("input tensor"));
  // Dims whose product overflows int64 are refused, not wrapped.
  shapes = graph->InferShapes({int64_t{1} << 40, 1, int64_t{1} << 40, int64_t{1} << 40});
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kResourceExhausted) << shapes.status();
  EXPECT_TRUE(graph->InferShapes({1, 1, 7, 7}).ok());
}

struct OutputSizeCase {
  std::string test_name;
  int64_t input, kernel, stride, dilation, pad_before, pad_after;
  int64_t expected;
};

void PrintTo(const OutputSizeCase& c, std::ostream* os) { *os << c.test_name; }

class ConvOutputSizeTest : public ::testing::TestWithParam<OutputSizeCase> {};

TEST_P(ConvOutputSizeTest, MatchesHandComputedSize) {
  const OutputSizeCase& c = GetParam();
  EXPECT_EQ(ConvOutputSize(c.input, c.kernel, c.stride, c.dilation, c.pad_before, c.pad_after),
            c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ConvOutputSizeTest,
    ::testing::Values(OutputSizeCase{"Same3x3", 7, 3, 1, 1, 1, 1, 7},
                      OutputSizeCase{"Valid3x3", 7, 3, 1, 1, 0, 0, 5},
                      OutputSizeCase{"ResNetStem", 224, 7, 2, 1, 3, 3, 112},
                      OutputSizeCase{"Stride2PadBeforeOnly", 7, 3, 2, 1, 1, 0, 3},
                      OutputSizeCase{"Stride2PadAfterOnly", 9, 3, 2, 1, 0, 2, 5},
                      OutputSizeCase{"Stride3DropsRemainder", 10, 2, 3, 1, 0, 0, 3},
                      OutputSizeCase{"Dilation2AsymmetricPad", 9, 3, 1, 2, 2, 1, 8},
                      OutputSizeCase{"StrideAndDilation", 10, 3, 3, 2, 0, 1, 3},
                      OutputSizeCase{"KernelEqualsInput", 5, 5, 1, 1, 0, 0, 1},
                      OutputSizeCase{"PaddingMakesRoom", 2, 5, 1, 1, 2, 1, 1},
                      OutputSizeCase{"KernelLargerThanInput", 4, 5, 1, 1, 0, 0, 0},
                      OutputSizeCase{"DilatedKernelLargerThanInput", 4, 3, 1, 2, 0, 0, 0}),
    [](const ::testing::TestParamInfo<OutputSizeCase>& info) { return info.param.test_name; });

TEST(GraphTest, InferShapesAppliesStrideDilationAndAsymmetricPadding) {
  GraphSpec spec;
  spec.name = "geometry";
  spec.input_channels = 2;
  ConvLayerSpec strided = Layer(2, 6, {3, 2}, 2);
  strided.stride = {2, 3};
  strided.pad_before = {1, 0};
  strided.pad_after = {0, 2};
  spec.layers.push_back(strided);
  ConvLayerSpec dilated = Layer(6, 5, {3, 3});
  dilated.dilation = {2, 1};
  dilated.pad_before = {2, 0};
  dilated.pad_after = {1, 1};
  spec.layers.push_back(dilated);
  std::shared_ptr<const Graph> graph = CreateOrDie(spec);
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::vector<Shape>> shapes = graph->InferShapes({3, 2, 9, 11});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 2u);
  // H: (9 + 1 - 3) / 2 + 1 = 4; W: (11 + 2 - 2) / 3 + 1 = 4.
  EXPECT_THAT((*shapes)[0], ElementsAre(3, 6, 4, 4));
  // H: 4 + 3 - 5 + 1 = 3; W: 4 + 1 - 3 + 1 = 3.
  EXPECT_THAT((*shapes)[1], ElementsAre(3, 5, 3, 3));
}

TEST(GraphTest, InferShapesHandlesThreeD) {
  GraphSpec spec;
  spec.name = "volume";
  spec.layout = Layout::kNCDHW;
  spec.input_channels = 1;
  ConvLayerSpec layer = Layer(1, 2, {3, 1, 2});
  layer.stride = {1, 2, 1};
  layer.pad_before = {1, 0, 0};
  spec.layers.push_back(layer);
  std::shared_ptr<const Graph> graph = CreateOrDie(spec);
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::vector<Shape>> shapes = graph->InferShapes({1, 1, 4, 5, 6});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_THAT(shapes->back(), ElementsAre(1, 2, 3, 3, 5));
}

TEST(GraphTest, InferShapesRejectsInputTooSmallForALaterLayer) {
  std::shared_ptr<const Graph> graph = CreateOrDie(TwoLayerSpec());
  ASSERT_NE(graph, nullptr);
  // 3x3 valid conv: 3x3 -> 1x1 works, 2x3 does not.
  ASSERT_TRUE(graph->InferShapes({1, 3, 3, 3}).ok());
  absl::StatusOr<std::vector<Shape>> shapes = graph->InferShapes({1, 3, 2, 3});
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shapes.status().message()), HasSubstr("too small"));
  EXPECT_THAT(std::string(shapes.status().message()), HasSubstr("layers[0]"));

  GraphSpec spec = TwoLayerSpec();
  spec.layers[0].kernel_size = {1, 1};
  spec.layers[0].weights = Float32Bytes(4 * 3);
  spec.layers[1].kernel_size = {2, 2};
  spec.layers[1].stride = {2, 2};
  spec.layers[1].weights = Float32Bytes(4 * 2 * 4);
  graph = CreateOrDie(spec);
  ASSERT_NE(graph, nullptr);
  shapes = graph->InferShapes({1, 3, 1, 5});
  ASSERT_FALSE(shapes.ok());
  EXPECT_THAT(std::string(shapes.status().message()), HasSubstr("layers[1]"));
}

TEST(GraphTest, InferShapesRejectsMalformedInputShapes) {
  std::shared_ptr<const Graph> graph = CreateOrDie(TwoLayerSpec());
  ASSERT_NE(graph, nullptr);
  for (const Shape& shape : {Shape{1, 3, 8}, Shape{1, 3, 8, 8, 8}, Shape{1, 4, 8, 8},
                             Shape{0, 3, 8, 8}, Shape{1, 3, -8, 8}, Shape{}}) {
    absl::StatusOr<std::vector<Shape>> shapes = graph->InferShapes(shape);
    ASSERT_FALSE(shapes.ok()) << ShapeToString(shape);
    EXPECT_EQ(shapes.status().code(), absl::StatusCode::kInvalidArgument) << shapes.status();
    EXPECT_THAT(std::string(shapes.status().message()), StartsWith("input shape"));
  }
}

TEST(GraphTest, FingerprintEqualForEqualSpecs) {
  std::shared_ptr<const Graph> a = CreateOrDie(TwoLayerSpec());
  std::shared_ptr<const Graph> b = CreateOrDie(TwoLayerSpec());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->id(), b->id());
  // Defaults spelled out are the same graph as defaults left empty.
  GraphSpec explicit_spec = TwoLayerSpec();
  explicit_spec.spatial_rank = 2;
  for (ConvLayerSpec& layer : explicit_spec.layers) {
    layer.stride = {1, 1};
    layer.dilation = {1, 1};
    layer.pad_before = {0, 0};
    layer.pad_after = {0, 0};
  }
  explicit_spec.layers[0].groups = 0;
  // Parameters of other activations do not change what this one computes.
  explicit_spec.layers[0].activation.alpha = 3.0f;
  std::shared_ptr<const Graph> c = CreateOrDie(explicit_spec);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(a->id(), c->id());
}

struct FingerprintChange {
  std::string test_name;
  SpecEdit mutate;
};

void PrintTo(const FingerprintChange& c, std::ostream* os) { *os << c.test_name; }

class GraphFingerprintTest : public ::testing::TestWithParam<FingerprintChange> {};

TEST_P(GraphFingerprintTest, ChangesWhenSpecChanges) {
  std::shared_ptr<const Graph> base = CreateOrDie(TwoLayerSpec());
  GraphSpec spec = TwoLayerSpec();
  GetParam().mutate(&spec);
  std::shared_ptr<const Graph> changed = CreateOrDie(spec);
  ASSERT_NE(base, nullptr);
  ASSERT_NE(changed, nullptr);
  EXPECT_NE(base->id(), changed->id());
}

std::vector<FingerprintChange> FingerprintChanges() {
  std::vector<FingerprintChange> cases;
  const auto add = [&cases](std::string test_name, SpecEdit mutate) {
    cases.push_back({std::move(test_name), std::move(mutate)});
  };
  add("Name", [](GraphSpec* s) { s->name = "two_layer.v2"; });
  add("OneWeightByte", [](GraphSpec* s) { s->layers[1].weights[5] ^= 1; });
  add("FirstWeightByteOfFirstLayer", [](GraphSpec* s) { s->layers[0].weights[0] ^= 0x40; });
  add("OneBiasByte", [](GraphSpec* s) { s->layers[0].bias[2] ^= 1; });
  add("BiasRemoved", [](GraphSpec* s) { s->layers[1].bias.clear(); });
  add("EluAlpha", [](GraphSpec* s) { s->layers[1].activation.alpha = 0.75f; });
  add("ReluSlope", [](GraphSpec* s) { s->layers[0].activation.negative_slope = 0.01f; });
  add("ReluClip", [](GraphSpec* s) {
    s->layers[0].activation.has_upper_clip = true;
    s->layers[0].activation.upper_clip = 6.0f;
  });
  add("ActivationKind", [](GraphSpec* s) { s->layers[0].activation.kind = ActivationKind::kTanh; });
  add("LayerName", [](GraphSpec* s) { s->layers[0].name = "stem"; });
  add("Stride", [](GraphSpec* s) { s->layers[0].stride = {1, 2}; });
  add("PadBefore", [](GraphSpec* s) { s->layers[0].pad_before = {1, 0}; });
  add("PadAfter", [](GraphSpec* s) { s->layers[0].pad_after = {0, 1}; });
  add("Layout", [](GraphSpec* s) { s->layout = Layout::kNHWC; });
  add("Groups", [](GraphSpec* s) {
    s->layers[1].groups = 1;
    s->layers[1].weights = Float32Bytes(4 * 4);
  });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Changes, GraphFingerprintTest, ::testing::ValuesIn(FingerprintChanges()),
                         [](const ::testing::TestParamInfo<FingerprintChange>& info) {
                           return info.param.test_name;
                         });

TEST(GraphTest, FingerprintTellsPaddingSidesApart) {
  GraphSpec spec = TwoLayerSpec();
  spec.layers[0].pad_before = {1, 0};
  std::shared_ptr<const Graph> before = CreateOrDie(spec);
  spec.layers[0].pad_before = {};
  spec.layers[0].pad_after = {1, 0};
  std::shared_ptr<const Graph> after = CreateOrDie(spec);
  ASSERT_NE(before, nullptr);
  ASSERT_NE(after, nullptr);
  EXPECT_NE(before->id(), after->id());
}

TEST(GraphTest, FingerprintOfSwishDependsOnBeta) {
  GraphSpec spec = TwoLayerSpec();
  spec.layers[1].activation.kind = ActivationKind::kSwish;
  spec.layers[1].activation.beta = 1.0f;
  std::shared_ptr<const Graph> a = CreateOrDie(spec);
  spec.layers[1].activation.beta = 1.5f;
  std::shared_ptr<const Graph> b = CreateOrDie(spec);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->id(), b->id());
}

}  // namespace
}  // namespace convserve
