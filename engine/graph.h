// The validated in-memory graph: an ordered list of conv -> bias ->
// activation layers with their weights, shape inference and fingerprint.
// A Graph is immutable once created and safe to share across threads.
#ifndef CONVSERVE_ENGINE_GRAPH_H_
#define CONVSERVE_ENGINE_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/activation.h"
#include "engine/tensor.h"

namespace convserve {

struct ConvLayerSpec {
  // Optional label used in messages.
  std::string name;
  // K.
  int64_t out_channels = 0;
  // One entry per spatial dim, required.
  std::vector<int64_t> kernel_size;
  // Empty means 1 per dim.
  std::vector<int64_t> stride;
  // Empty means 1 per dim.
  std::vector<int64_t> dilation;
  // Empty means 0 per dim.
  std::vector<int64_t> pad_before;
  std::vector<int64_t> pad_after;
  // 0 is read as 1.
  int64_t groups = 1;
  // K, C/groups, spatial... (channels-first graphs) or K, spatial..., C/groups
  // (channels-last graphs), in the graph's dtype.
  std::string weights;
  // Empty (no bias) or K values in the graph's dtype.
  std::string bias;
  // Applied after the bias.
  Activation activation;
};

struct GraphSpec {
  // Unique among loaded graphs.
  std::string name;
  // Element type of inputs, weights, biases and outputs.
  DType dtype = DType::kFloat32;
  // Byte order of inputs and outputs.
  Layout layout = Layout::kNCHW;
  // C of the input.
  int64_t input_channels = 0;
  // 0 means SpatialRank(layout).
  int64_t spatial_rank = 0;
  // Applied in order; each layer's input channels are the previous K.
  std::vector<ConvLayerSpec> layers;
};

// Bounds every graph and request must stay within.
struct GraphLimits {
  // Layers per graph.
  int64_t max_layers = 256;
  // Kernel extent per spatial dim.
  int64_t max_kernel_size = 64;
  // Stride, dilation and each padding per spatial dim.
  int64_t max_stride = 64;
  int64_t max_dilation = 64;
  int64_t max_padding = 256;
  // Channels of any tensor and groups.
  int64_t max_channels = 1 << 16;
  // Bytes of any input, intermediate or output tensor (RESOURCE_EXHAUSTED).
  int64_t max_tensor_bytes = int64_t{1} << 30;
  // Bytes of all weights and biases together (RESOURCE_EXHAUSTED).
  int64_t max_parameter_bytes = int64_t{2} << 30;
  // Graph name length.
  int64_t max_name_length = 128;
};

// Output spatial extent of one conv dim; may be < 1 for invalid inputs.
int64_t ConvOutputSize(int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                       int64_t pad_before, int64_t pad_after);

class Graph {
 public:
  // Validates every field of `spec` and fills defaults (stride, dilation,
  // padding, groups, spatial_rank). Errors are INVALID_ARGUMENT naming the
  // field as in the proto (e.g. "layers[1].weights"), or RESOURCE_EXHAUSTED
  // for parameters beyond `limits`.
  static absl::StatusOr<std::shared_ptr<const Graph>> Create(GraphSpec spec,
                                                             const GraphLimits& limits = {});

  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const GraphSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  // Hex fingerprint of the canonical definition and weights: the same graph
  // loaded twice has the same id.
  const std::string& id() const { return id_; }
  int spatial_rank() const { return static_cast<int>(spec_.spatial_rank); }
  int64_t parameter_bytes() const { return parameter_bytes_; }
  const GraphLimits& limits() const { return limits_; }

  // Input channels of layer i.
  int64_t LayerInputChannels(size_t i) const;
  // Weight dims K, C/groups, spatial... of layer i (logical order).
  Shape WeightShape(size_t i) const;

  // Checks a logical input shape (N, C, spatial...) and returns the output
  // shape of every layer. INVALID_ARGUMENT names the offending dim or layer;
  // RESOURCE_EXHAUSTED when a tensor exceeds limits().max_tensor_bytes.
  absl::StatusOr<std::vector<Shape>> InferShapes(const Shape& input_shape) const;

 private:
  Graph(GraphSpec spec, GraphLimits limits, std::string id, int64_t parameter_bytes)
      : spec_(std::move(spec)),
        limits_(limits),
        id_(std::move(id)),
        parameter_bytes_(parameter_bytes) {}

  const GraphSpec spec_;
  const GraphLimits limits_;
  const std::string id_;
  const int64_t parameter_bytes_;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_GRAPH_H_
