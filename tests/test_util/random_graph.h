// Seeded random conv -> bias -> activation graphs for oracle tests: every
// dtype, layout, grouping, geometry and activation the wire contract allows,
// drawn per seed so that a few hundred seeds cover them all, and every graph
// valid for its input. The draws use only std::mt19937_64 output (no
// <random> distributions, whose results differ between standard libraries),
// so a seed printed on one host rebuilds the same graph on another.
#ifndef CONVSERVE_TESTS_TEST_UTIL_RANDOM_GRAPH_H_
#define CONVSERVE_TESTS_TEST_UTIL_RANDOM_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"

namespace convserve {

struct RandomGraphOptions {
  // Largest input extent per spatial dim of 2-D and of 3-D graphs.
  int64_t max_spatial_2d = 24;
  int64_t max_spatial_3d = 9;
  // Largest kernel extent per spatial dim of 2-D and of 3-D layers.
  int64_t max_kernel_2d = 7;
  int64_t max_kernel_3d = 3;
  // Largest channel count of any tensor (input C and every layer's K).
  int64_t max_channels = 16;
  // Layers per graph are drawn from 1..max_layers.
  int max_layers = 4;
  // Batch is drawn from 1..max_batch (less when max_macs allows no more).
  int64_t max_batch = 8;
  // Multiply-accumulates of one request through the whole graph, batch
  // included: bounds the float64 reference's time.
  int64_t max_macs = 2'000'000;
  // Share of graphs with a 3-D layout (NCDHW, NDHWC).
  double three_d_fraction = 0.2;
  // Share of graphs whose channel counts are all multiples of 8, the
  // alignment cuDNN's fused NHWC engines want; the rest draw any count.
  double aligned_channels_fraction = 0.25;
  // Graph names are "<name_prefix>_<seed>".
  std::string name_prefix = "random";
};

// One graph with its parameters and one input to send it.
struct RandomGraphCase {
  // The seed it was drawn from (parameters and input included).
  uint64_t seed = 0;
  // Weights and biases filled; unique name per seed.
  v1::GraphDef graph;
  // Logical N, C, spatial... of `input`.
  std::vector<int64_t> input_shape;
  // Bytes of the graph's dtype in its layout.
  std::string input;
  // One line: seed, dtype, layout, input shape and every layer's geometry,
  // for failure messages.
  std::string description;
};

// Draws a graph valid for its input (Graph::Create and InferShapes accept
// it) from `seed`. Deterministic for a given seed and options.
RandomGraphCase MakeRandomGraph(uint64_t seed, const RandomGraphOptions& options = {});

// A fixed graph (e.g. a regression case read from a file) made into a case:
// empty weights and biases are filled from `seed` (biases only when
// `with_bias`), the input is drawn from `seed`, and the graph is validated
// for `input_shape`. INVALID_ARGUMENT when the graph does not accept it.
absl::StatusOr<RandomGraphCase> MakeGraphCase(v1::GraphDef graph, std::vector<int64_t> input_shape,
                                              uint64_t seed, bool with_bias);

// The one-line description of `graph` run on `input_shape`.
std::string DescribeGraph(const v1::GraphDef& graph, const std::vector<int64_t>& input_shape,
                          uint64_t seed);

// Multiply-accumulates of one request of `input_shape` through `graph`
// (whose layers must all give outputs of at least 1 per dim).
int64_t GraphMacs(const v1::GraphDef& graph, const std::vector<int64_t>& input_shape);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_RANDOM_GRAPH_H_
