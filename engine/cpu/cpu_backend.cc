#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

// Geometry of one layer with 2-D layers widened to 3-D (D = T = 1), so one
// loop nest serves both.
struct ConvGeometry {
  int64_t batch, in_channels, out_channels, groups;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad[3];
};

ConvGeometry MakeGeometry(const ConvLayerSpec& layer, const Shape& in_shape,
                          const Shape& out_shape) {
  ConvGeometry g;
  g.batch = in_shape[0];
  g.in_channels = in_shape[1];
  g.out_channels = layer.out_channels;
  g.groups = layer.groups;
  const int rank = static_cast<int>(in_shape.size()) - 2;
  const int offset = 3 - rank;
  for (int d = 0; d < 3; ++d) {
    const bool real = d >= offset;
    const int s = d - offset;
    g.in[d] = real ? in_shape[2 + s] : 1;
    g.out[d] = real ? out_shape[2 + s] : 1;
    g.kernel[d] = real ? layer.kernel_size[s] : 1;
    g.stride[d] = real ? layer.stride[s] : 1;
    g.dilation[d] = real ? layer.dilation[s] : 1;
    g.pad[d] = real ? layer.pad_before[s] : 0;
  }
  return g;
}

// Weights as float in K, C/groups, spatial... order whatever the graph layout.
std::vector<float> ChannelsFirstWeights(const Graph& graph, size_t index) {
  const ConvLayerSpec& layer = graph.spec().layers[index];
  const Shape shape = graph.WeightShape(index);
  std::vector<float> weights(NumElements(shape));
  ToFloat(graph.spec().dtype, layer.weights.data(), weights.data(), weights.size());
  if (!IsChannelsLast(graph.spec().layout)) return weights;
  std::vector<float> reordered(weights.size());
  ChannelsLastToFirst(shape, weights.data(), reordered.data());
  return reordered;
}

class CpuExecutable : public Executable {
 public:
  CpuExecutable(std::shared_ptr<const Graph> graph, Shape input_shape,
                std::vector<Shape> layer_outputs, ThreadPool* pool)
      : graph_(std::move(graph)),
        input_shape_(std::move(input_shape)),
        layer_outputs_(std::move(layer_outputs)),
        pool_(pool) {}

  const Shape& input_shape() const override { return input_shape_; }
  const Shape& output_shape() const override { return layer_outputs_.back(); }

  using Executable::Run;
  absl::Status Run(absl::Span<const uint8_t> input, absl::Span<uint8_t> output,
                   const CancelCheck& cancelled) override {
    const GraphSpec& spec = graph_->spec();
    const size_t element = DTypeSize(spec.dtype);
    const int64_t in_count = NumElements(input_shape_);
    const int64_t out_count = NumElements(output_shape());
    if (input.size() != static_cast<size_t>(in_count) * element) {
      return absl::InvalidArgumentError(absl::StrCat("input holds ", input.size(),
                                                     " bytes; shape ",
                                                     ShapeToString(input_shape_), " needs ",
                                                     in_count * element));
    }
    if (output.size() != static_cast<size_t>(out_count) * element) {
      return absl::InternalError(absl::StrCat("output buffer holds ", output.size(),
                                              " bytes; expected ", out_count * element));
    }
    const bool channels_last = IsChannelsLast(spec.layout);
    std::vector<float> current(in_count);
    std::vector<float> scratch;
    ToFloat(spec.dtype, input.data(), current.data(), current.size());
    if (channels_last) {
      scratch.resize(current.size());
      ChannelsLastToFirst(input_shape_, current.data(), scratch.data());
      current.swap(scratch);
    }
    Shape in_shape = input_shape_;
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      // Between layers only: a layer is one ParallelFor that is not
      // interruptible, so a stop costs at most the rest of one layer.
      if (i > 0 && cancelled && cancelled()) {
        return LayersCancelledError(*graph_, i, spec.layers.size());
      }
      std::vector<float> next(NumElements(layer_outputs_[i]));
      RunLayer(i, in_shape, current, &next);
      current.swap(next);
      in_shape = layer_outputs_[i];
    }
    if (channels_last) {
      scratch.resize(current.size());
      ChannelsFirstToLast(output_shape(), current.data(), scratch.data());
      current.swap(scratch);
    }
    FromFloat(spec.dtype, current.data(), output.data(), current.size());
    return absl::OkStatus();
  }

 private:
  // Direct convolution in channels-first float, parallel over (n, k) planes.
  // Each plane accumulates in float, then adds the bias, applies the
  // activation and rounds to the graph dtype, as a GPU layer stores it.
  void RunLayer(size_t index, const Shape& in_shape, const std::vector<float>& in,
                std::vector<float>* out) const {
    const GraphSpec& spec = graph_->spec();
    const ConvLayerSpec& layer = spec.layers[index];
    const ConvGeometry g = MakeGeometry(layer, in_shape, layer_outputs_[index]);
    const std::vector<float> weights = ChannelsFirstWeights(*graph_, index);
    std::vector<float> bias(g.out_channels, 0.0f);
    if (!layer.bias.empty()) ToFloat(spec.dtype, layer.bias.data(), bias.data(), bias.size());
    const int64_t cin_per_group = g.in_channels / g.groups;
    const int64_t k_per_group = g.out_channels / g.groups;
    const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
    const int64_t taps = g.kernel[0] * g.kernel[1] * g.kernel[2];
    pool_->ParallelFor(g.batch * g.out_channels, [&](int64_t item) {
      const int64_t n = item / g.out_channels;
      const int64_t k = item % g.out_channels;
      const int64_t group = k / k_per_group;
      float* plane = out->data() + item * out_plane;
      std::fill(plane, plane + out_plane, 0.0f);
      for (int64_t c = 0; c < cin_per_group; ++c) {
        const float* src = in.data() + (n * g.in_channels + group * cin_per_group + c) * in_plane;
        const float* w = weights.data() + (k * cin_per_group + c) * taps;
        for (int64_t t = 0; t < g.kernel[0]; ++t) {
          for (int64_t r = 0; r < g.kernel[1]; ++r) {
            for (int64_t s = 0; s < g.kernel[2]; ++s) {
              const float wv = w[(t * g.kernel[1] + r) * g.kernel[2] + s];
              AccumulateTap(g, src, wv, t, r, s, plane);
            }
          }
        }
      }
      const Activation& act = layer.activation;
      for (int64_t p = 0; p < out_plane; ++p) plane[p] = ApplyActivation(act, plane[p] + bias[k]);
      RoundToDType(spec.dtype, plane, out_plane);
    });
  }

  // plane[od, oh, ow] += wv * src[od*sd - pd + t*dd, ...] over valid positions.
  static void AccumulateTap(const ConvGeometry& g, const float* src, float wv, int64_t t,
                            int64_t r, int64_t s, float* plane) {
    // First and one-past-last ow whose input column lies inside the row.
    const int64_t col_offset = s * g.dilation[2] - g.pad[2];
    const int64_t ow_begin =
        col_offset >= 0 ? 0 : (-col_offset + g.stride[2] - 1) / g.stride[2];
    const int64_t ow_end =
        col_offset >= g.in[2]
            ? 0
            : std::min(g.out[2], (g.in[2] - 1 - col_offset) / g.stride[2] + 1);
    if (ow_begin >= ow_end) return;
    for (int64_t od = 0; od < g.out[0]; ++od) {
      const int64_t id = od * g.stride[0] - g.pad[0] + t * g.dilation[0];
      if (id < 0 || id >= g.in[0]) continue;
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t ih = oh * g.stride[1] - g.pad[1] + r * g.dilation[1];
        if (ih < 0 || ih >= g.in[1]) continue;
        const float* row = src + (id * g.in[1] + ih) * g.in[2] + col_offset;
        float* dst = plane + (od * g.out[1] + oh) * g.out[2];
        for (int64_t ow = ow_begin; ow < ow_end; ++ow) dst[ow] += wv * row[ow * g.stride[2]];
      }
    }
  }

  const std::shared_ptr<const Graph> graph_;
  const Shape input_shape_;
  const std::vector<Shape> layer_outputs_;
  ThreadPool* const pool_;  // owned by the backend, which outlives executables
};

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const CpuBackendOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu threads must be >= 0, got ", options.threads));
  }
  const int threads =
      options.threads > 0 ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::unique_ptr<CpuBackend>(new CpuBackend(std::make_unique<ThreadPool>(threads)));
}

std::string CpuBackend::Describe() const {
  return absl::StrCat("cpu reference backend, ", pool_->size(), " threads");
}

absl::StatusOr<std::shared_ptr<Executable>> CpuBackend::Compile(
    std::shared_ptr<const Graph> graph, const Shape& input_shape) {
  ASSIGN_OR_RETURN(std::vector<Shape> outputs, graph->InferShapes(input_shape));
  return std::shared_ptr<Executable>(
      new CpuExecutable(std::move(graph), input_shape, std::move(outputs), pool_.get()));
}

}  // namespace convserve
