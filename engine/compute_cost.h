// The arithmetic a request costs, from its shapes alone, so the server can
// refuse an expensive request before it reaches a worker. Pure functions;
// thread-safe.
#ifndef CONVSERVE_ENGINE_COMPUTE_COST_H_
#define CONVSERVE_ENGINE_COMPUTE_COST_H_

#include <vector>

#include "absl/status/status.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

// Floating-point operations of one run of `graph` whose layer outputs are
// `layer_outputs` (Graph::InferShapes of the input shape): per layer
// 2 * N * K * (C / groups) * prod(kernel) * prod(output spatial) for the
// convolution (a multiply and an add per tap), plus one per output element
// for the bias when the layer has one and one for a non-identity
// activation. A double, since a deep stack of large layers can pass 2^63.
double RequestFlops(const Graph& graph, const std::vector<Shape>& layer_outputs);

// INVALID_ARGUMENT naming the request's figure and the limit when `flops`
// exceeds `max_flops`; OK when within it or when `max_flops` is 0 (no limit).
absl::Status CheckRequestFlops(const Graph& graph, const Shape& input_shape, double flops,
                               double max_flops);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_COMPUTE_COST_H_
