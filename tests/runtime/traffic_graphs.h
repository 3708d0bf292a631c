// Graphs and mixed-shape request sets shared by the traffic tests.
#ifndef CONVSERVE_TESTS_RUNTIME_TRAFFIC_GRAPHS_H_
#define CONVSERVE_TESTS_RUNTIME_TRAFFIC_GRAPHS_H_

#include <cstdlib>
#include <string>
#include <vector>

#include "client/graph_file.h"
#include "tests/test_util/traffic.h"

namespace convserve {

// A three-layer conv stack named `name`, parameters from `seed`.
inline v1::GraphDef TrafficGraph(const std::string& name, v1::DataType type, v1::Layout layout,
                                 uint64_t seed) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(type);
  graph.set_layout(layout);
  graph.set_input_channels(3);
  const int widths[] = {16, 8, 24};
  for (int i = 0; i < 3; ++i) {
    v1::ConvLayer* layer = graph.add_layers();
    layer->set_out_channels(widths[i]);
    layer->add_kernel_size(3);
    layer->add_kernel_size(3);
    layer->add_pad_before(1);
    layer->add_pad_before(1);
    layer->add_pad_after(1);
    layer->add_pad_after(1);
    if (i == 2) {
      layer->add_stride(2);
      layer->add_stride(2);
    }
    layer->mutable_activation()->set_kind(i == 1 ? v1::Activation::SWISH : v1::Activation::RELU);
  }
  if (!FillParameters(seed, true, &graph).ok()) std::abort();  // the graph above is valid
  return graph;
}

// Requests of several shapes for `graph`, with expected outputs.
inline std::vector<TrafficRequest> MixedShapes(const v1::GraphDef& graph, double bound) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 3, 16, 16}, {2, 3, 12, 20}, {4, 3, 8, 8}, {1, 3, 32, 24}};
  std::vector<TrafficRequest> requests;
  for (size_t i = 0; i < shapes.size(); ++i) {
    requests.push_back(MakeTrafficRequest(graph, shapes[i], 100 + i, bound));
  }
  return requests;
}

}  // namespace convserve

#endif  // CONVSERVE_TESTS_RUNTIME_TRAFFIC_GRAPHS_H_
