#include "engine/compute_cost.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace convserve {

double RequestFlops(const Graph& graph, const std::vector<Shape>& layer_outputs) {
  const GraphSpec& spec = graph.spec();
  double flops = 0;
  for (size_t i = 0; i < spec.layers.size() && i < layer_outputs.size(); ++i) {
    const ConvLayerSpec& layer = spec.layers[i];
    // N * K * output spatial: the output tensor's elements.
    const Shape& output = layer_outputs[i];
    const int64_t groups = layer.groups > 0 ? layer.groups : 1;
    double taps = static_cast<double>(graph.LayerInputChannels(i) / groups);
    for (int64_t k : layer.kernel_size) taps *= static_cast<double>(k);
    double output_elements = 1;
    for (int64_t d : output) output_elements *= static_cast<double>(d);
    flops += 2 * output_elements * taps;
    if (!layer.bias.empty()) flops += output_elements;
    if (layer.activation.kind != ActivationKind::kIdentity) flops += output_elements;
  }
  return flops;
}

absl::Status CheckRequestFlops(const Graph& graph, const Shape& input_shape, double flops,
                               double max_flops) {
  if (max_flops <= 0 || flops <= max_flops) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "input shape %s of graph '%s' needs %.4g floating-point operations, more than the "
      "server's per-request limit of %.4g (--max_request_flops); send a smaller batch or "
      "smaller images, or split the request",
      ShapeToString(input_shape), graph.name(), flops, max_flops));
}

}  // namespace convserve
