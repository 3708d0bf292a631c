// The one-layer graph of the server tests that need a graph but test
// something else (graph management, compute limits): float32 NCHW, C=3 ->
// K=4, 3x3, no padding, bias and ReLU, weights from `seed`.
#ifndef CONVSERVE_TESTS_TEST_UTIL_SMALL_GRAPH_H_
#define CONVSERVE_TESTS_TEST_UTIL_SMALL_GRAPH_H_

#include <cstdint>
#include <string>

#include "client/graph_file.h"
#include "convserve/v1/convserve.pb.h"
#include "gtest/gtest.h"

namespace convserve {

inline v1::GraphDef SmallConvGraph(const std::string& name, uint64_t seed) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(3);
  v1::ConvLayer* layer = graph.add_layers();
  layer->set_out_channels(4);
  layer->add_kernel_size(3);
  layer->add_kernel_size(3);
  layer->mutable_activation()->set_kind(v1::Activation::RELU);
  EXPECT_TRUE(FillParameters(seed, /*with_bias=*/true, &graph).ok());
  return graph;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_SMALL_GRAPH_H_
