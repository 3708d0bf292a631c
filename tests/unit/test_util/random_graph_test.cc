// The random-graph generator behind the oracle tests: every graph it draws is
// valid for its input and within its bounds, a seed always draws the same
// graph, and a few hundred seeds cover every dtype, layout, grouping,
// geometry and activation it promises, so the oracle tests cannot quietly
// stop exercising one of them.
#include "tests/test_util/random_graph.h"

#include <memory>
#include <set>
#include <string>
#include <utility>

#include "engine/graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {
namespace {

constexpr int kSeeds = 400;

RandomGraphOptions SmallOptions() {
  RandomGraphOptions options;
  options.max_macs = 500'000;
  return options;
}

// What a set of graphs exercised, as names, so a missing one is readable.
std::set<std::string> Features(const RandomGraphCase& c) {
  std::set<std::string> seen;
  const v1::GraphDef& graph = c.graph;
  seen.insert(v1::DataType_Name(graph.data_type()));
  seen.insert(v1::Layout_Name(graph.layout()));
  seen.insert("layers" + std::to_string(graph.layers_size()));
  seen.insert("batch" + std::to_string(c.input_shape[0]));
  int64_t channels = graph.input_channels();
  seen.insert(channels % 2 == 1 ? "odd_channels" : "even_channels");
  for (size_t d = 2; d < c.input_shape.size(); ++d) {
    seen.insert(c.input_shape[d] % 2 == 1 ? "odd_spatial" : "even_spatial");
  }
  for (const v1::ConvLayer& layer : graph.layers()) {
    const int64_t groups = layer.groups() > 0 ? layer.groups() : 1;
    if (groups == 1) seen.insert("dense");
    if (groups == 2 && channels > 2) seen.insert("groups2");
    if (groups == channels && channels > 1) {
      seen.insert("depthwise_x" + std::to_string(layer.out_channels() / channels));
    }
    seen.insert(layer.out_channels() % 2 == 1 ? "odd_channels" : "even_channels");
    seen.insert(layer.bias().empty() ? "no_bias" : "bias");
    for (int d = 0; d < layer.kernel_size_size(); ++d) {
      seen.insert("kernel" + std::to_string(layer.kernel_size(d)));
      if (layer.stride_size() > 0 && layer.stride(d) == 2) seen.insert("stride2");
      if (layer.dilation_size() > 0 && layer.dilation(d) == 2) seen.insert("dilation2");
      if (layer.pad_before(d) != layer.pad_after(d)) seen.insert("asymmetric_pad");
    }
    if (layer.stride_size() == 0) seen.insert("default_stride");
    const v1::Activation& a = layer.activation();
    seen.insert(v1::Activation::Kind_Name(a.kind()));
    if (a.has_upper_clip()) seen.insert("relu_clip");
    if (a.negative_slope() != 0.0f) seen.insert("relu_slope");
    if (a.has_alpha()) seen.insert("elu_alpha");
    if (a.has_beta()) seen.insert(v1::Activation::Kind_Name(a.kind()) + "_beta");
    channels = layer.out_channels();
  }
  return seen;
}

TEST(RandomGraphTest, SameSeedDrawsSameGraphAndInput) {
  for (uint64_t seed : {1u, 77u, 123456u}) {
    const RandomGraphCase a = MakeRandomGraph(seed, SmallOptions());
    const RandomGraphCase b = MakeRandomGraph(seed, SmallOptions());
    EXPECT_EQ(a.graph.SerializeAsString(), b.graph.SerializeAsString()) << seed;
    EXPECT_EQ(a.input, b.input) << seed;
    EXPECT_EQ(a.input_shape, b.input_shape) << seed;
    EXPECT_EQ(a.description, b.description) << seed;
  }
  EXPECT_NE(MakeRandomGraph(1, SmallOptions()).graph.SerializeAsString(),
            MakeRandomGraph(2, SmallOptions()).graph.SerializeAsString());
}

TEST(RandomGraphTest, EveryGraphIsValidWithinBoundsAndHasNonZeroParameters) {
  const RandomGraphOptions options = SmallOptions();
  std::set<std::string> names;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const RandomGraphCase c = MakeRandomGraph(seed, options);
    SCOPED_TRACE(c.description);
    EXPECT_TRUE(names.insert(c.graph.name()).second) << "duplicate name " << c.graph.name();
    EXPECT_LE(GraphMacs(c.graph, c.input_shape), options.max_macs);
    EXPECT_LE(c.input_shape[0], options.max_batch);
    EXPECT_LE(c.graph.layers_size(), options.max_layers);
    v1::GraphDef copy = c.graph;
    absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const DType dtype = spec->dtype;
    absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<std::vector<Shape>> shapes = (*graph)->InferShapes(c.input_shape);
    ASSERT_TRUE(shapes.ok()) << shapes.status();
    for (const Shape& shape : *shapes) {
      EXPECT_LE(shape[1], options.max_channels);
      for (int64_t d : shape) EXPECT_GE(d, 1);
    }
    EXPECT_EQ(c.input.size(), NumElements(c.input_shape) * DTypeSize(dtype));
    for (double v : DecodeToDouble(dtype, c.input)) ASSERT_NE(v, 0.0);
    for (const v1::ConvLayer& layer : c.graph.layers()) {
      for (double v : DecodeToDouble(dtype, layer.weights())) ASSERT_NE(v, 0.0);
      for (double v : DecodeToDouble(dtype, layer.bias())) ASSERT_NE(v, 0.0);
    }
  }
}

TEST(RandomGraphTest, FewHundredSeedsCoverEveryFeature) {
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const std::set<std::string> features = Features(MakeRandomGraph(seed, SmallOptions()));
    seen.insert(features.begin(), features.end());
  }
  std::vector<std::string> expected = {
      "FLOAT32",      "FLOAT16",        "BFLOAT16",       "NCHW",         "NHWC",
      "NCDHW",        "NDHWC",          "layers1",        "layers2",      "layers3",
      "layers4",      "batch1",         "batch8",         "odd_channels", "even_channels",
      "odd_spatial",  "even_spatial",   "dense",          "groups2",      "depthwise_x1",
      "depthwise_x2", "depthwise_x3",   "bias",           "no_bias",      "stride2",
      "dilation2",    "asymmetric_pad", "default_stride", "IDENTITY",     "RELU",
      "relu_clip",    "relu_slope",     "TANH",           "SIGMOID",      "ELU",
      "elu_alpha",    "GELU",           "GELU_TANH",      "SOFTPLUS",     "SOFTPLUS_beta",
      "SWISH",        "SWISH_beta"};
  for (int k = 1; k <= 7; ++k) expected.push_back("kernel" + std::to_string(k));
  for (const std::string& feature : expected) {
    EXPECT_TRUE(seen.count(feature)) << "no graph in " << kSeeds << " seeds has " << feature;
  }
}

TEST(RandomGraphTest, ThreeDimensionalGraphsAreTheMinority) {
  int three_d = 0;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const v1::Layout layout = MakeRandomGraph(seed, SmallOptions()).graph.layout();
    three_d += layout == v1::NCDHW || layout == v1::NDHWC;
  }
  // three_d_fraction is 0.2: 80 of 400 expected, far from both bounds.
  EXPECT_GT(three_d, kSeeds / 10);
  EXPECT_LT(three_d, kSeeds * 3 / 10);
}

TEST(RandomGraphTest, DescriptionNamesSeedAndEveryLayer) {
  const RandomGraphCase c = MakeRandomGraph(42, SmallOptions());
  EXPECT_THAT(c.description, ::testing::HasSubstr("seed=42"));
  EXPECT_THAT(c.description, ::testing::HasSubstr(v1::DataType_Name(c.graph.data_type())));
  EXPECT_THAT(c.description, ::testing::HasSubstr(v1::Layout_Name(c.graph.layout())));
  for (int i = 0; i < c.graph.layers_size(); ++i) {
    EXPECT_THAT(c.description, ::testing::HasSubstr(" | L" + std::to_string(i) + " "));
  }
  EXPECT_EQ(c.description.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace convserve
