#include "engine/compute_cost.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

std::string Float32Bytes(int64_t count) { return std::string(count * 4, '\x01'); }

ConvLayerSpec Layer(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel,
                    int64_t groups, bool bias, ActivationKind activation) {
  ConvLayerSpec layer;
  layer.out_channels = out_channels;
  layer.kernel_size = kernel;
  layer.groups = groups;
  int64_t count = out_channels * (in_channels / groups);
  for (int64_t k : kernel) count *= k;
  layer.weights = Float32Bytes(count);
  if (bias) layer.bias = Float32Bytes(out_channels);
  layer.activation.kind = activation;
  return layer;
}

// 8 -> 16 channels 3x3 stride 2 with bias and ReLU, then a depthwise 3x3
// (groups 16) with neither, on N=2, 8x32x32.
std::shared_ptr<const Graph> TwoLayerGraph() {
  GraphSpec spec;
  spec.name = "cost";
  spec.input_channels = 8;
  spec.layers.push_back(Layer(8, 16, {3, 3}, 1, true, ActivationKind::kRelu));
  spec.layers.back().stride = {2, 2};
  spec.layers.back().pad_before = {1, 1};
  spec.layers.back().pad_after = {1, 1};
  spec.layers.push_back(Layer(16, 16, {3, 3}, 16, false, ActivationKind::kIdentity));
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *graph;
}

TEST(ComputeCostTest, CountsConvTapsBiasAndActivationPerLayer) {
  std::shared_ptr<const Graph> graph = TwoLayerGraph();
  const Shape input = {2, 8, 32, 32};
  absl::StatusOr<std::vector<Shape>> outputs = graph->InferShapes(input);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ((*outputs)[0], (Shape{2, 16, 16, 16}));
  ASSERT_EQ((*outputs)[1], (Shape{2, 16, 14, 14}));
  // Layer 0: 2*N*K*(C/g)*R*S*P*Q = 2*2*16*8*9*16*16, plus bias and ReLU on
  // its 2*16*16*16 outputs. Layer 1 (depthwise): 2*2*16*1*9*14*14, no extras.
  const double layer0 = 2.0 * 2 * 16 * 8 * 9 * 16 * 16 + 2.0 * (2 * 16 * 16 * 16);
  const double layer1 = 2.0 * 2 * 16 * 1 * 9 * 14 * 14;
  EXPECT_DOUBLE_EQ(RequestFlops(*graph, *outputs), layer0 + layer1);
}

TEST(ComputeCostTest, GrowsLinearlyWithTheBatch) {
  std::shared_ptr<const Graph> graph = TwoLayerGraph();
  const double one = RequestFlops(*graph, *graph->InferShapes({1, 8, 32, 32}));
  const double eight = RequestFlops(*graph, *graph->InferShapes({8, 8, 32, 32}));
  EXPECT_GT(one, 0);
  EXPECT_DOUBLE_EQ(eight, 8 * one);
}

TEST(ComputeCostTest, RefusesAboveTheLimitNamingFigureAndLimit) {
  std::shared_ptr<const Graph> graph = TwoLayerGraph();
  const Shape input = {2, 8, 32, 32};
  const double flops = RequestFlops(*graph, *graph->InferShapes(input));
  const absl::Status refused = CheckRequestFlops(*graph, input, flops, flops - 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("[2, 8, 32, 32]"));
  EXPECT_THAT(refused.message(), HasSubstr("'cost'"));
  EXPECT_THAT(refused.message(), HasSubstr("needs 1.309e+06 floating-point operations"));
  EXPECT_THAT(refused.message(), HasSubstr("--max_request_flops"));
  EXPECT_TRUE(CheckRequestFlops(*graph, input, flops, flops).ok());
  EXPECT_TRUE(CheckRequestFlops(*graph, input, flops, 0).ok()) << "0 means no limit";
}

}  // namespace
}  // namespace convserve
