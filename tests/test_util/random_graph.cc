#include "tests/test_util/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/graph_file.h"
#include "engine/graph.h"
#include "engine/tensor.h"
#include "server/proto_convert.h"

namespace convserve {
namespace {

// Graphs redrawn before the generator gives up: reaching it means the
// options admit no valid graph (or a generator bug), not bad luck.
constexpr int kMaxGraphDraws = 10000;
// Redraws of one layer before the whole graph is redrawn.
constexpr int kMaxLayerDraws = 64;

// Uniform draws from the raw engine output only, so a seed means the same
// graph under every standard library.
class Draws {
 public:
  explicit Draws(uint64_t seed) : engine_(seed) {}

  // Uniform in [lo, hi]; the modulo bias is far below what matters here.
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi - lo + 1));
  }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Real(double lo, double hi) { return lo + (hi - lo) * Unit(); }
  bool Chance(double p) { return Unit() < p; }
  // Uniform magnitude in [0.1, 1] * bound with a random sign: fresh values,
  // never zero, so no weight, bias or input element is silently absent.
  float NonZero(double bound) {
    const double magnitude = Real(0.1, 1.0) * bound;
    return static_cast<float>(Chance(0.5) ? magnitude : -magnitude);
  }

 private:
  std::mt19937_64 engine_;
};

DType ToDType(v1::DataType type) {
  return DTypeFromProto(type, "data_type").value_or(DType::kFloat32);
}

// A parameter rounded to two decimals, so the description prints it exactly.
float Param(Draws* draws, double lo, double hi) {
  return static_cast<float>(std::round(draws->Real(lo, hi) * 100.0) / 100.0);
}

std::string RandomBytes(v1::DataType type, int64_t count, double bound, Draws* draws) {
  std::vector<float> values(count);
  for (float& v : values) v = draws->NonZero(bound);
  std::string bytes(values.size() * DTypeSize(ToDType(type)), '\0');
  FromFloat(ToDType(type), values.data(), bytes.data(), values.size());
  return bytes;
}

v1::Activation DrawActivation(Draws* draws) {
  v1::Activation activation;
  const auto kind = static_cast<v1::Activation::Kind>(draws->Int(0, 8));
  activation.set_kind(kind);
  switch (kind) {
    case v1::Activation::RELU: {
      // Plain, clipped (ReLU6-like), leaky, or both.
      const int64_t variant = draws->Int(0, 3);
      if (variant & 1) activation.set_upper_clip(Param(draws, 0.5, 6.0));
      if (variant & 2) activation.set_negative_slope(Param(draws, 0.01, 0.3));
      break;
    }
    case v1::Activation::ELU:
      // Unset some of the time: the default (1) must be honoured too.
      if (draws->Chance(0.75)) activation.set_alpha(Param(draws, 0.1, 2.0));
      break;
    case v1::Activation::SOFTPLUS:
      if (draws->Chance(0.75)) activation.set_beta(Param(draws, 0.5, 3.0));
      break;
    case v1::Activation::SWISH:
      if (draws->Chance(0.75)) activation.set_beta(Param(draws, 0.5, 2.0));
      break;
    default:
      break;
  }
  return activation;
}

int64_t Groups(const v1::ConvLayer& layer) { return layer.groups() > 0 ? layer.groups() : 1; }

// Per-dim value of a repeated field that may be empty (the default).
int64_t DimOr(const google::protobuf::RepeatedField<int32_t>& values, int d, int64_t fallback) {
  return values.empty() ? fallback : values[d];
}

// Logical output dims of `layer` on `in`; empty when some dim is < 1.
std::vector<int64_t> LayerOutput(const v1::ConvLayer& layer, const std::vector<int64_t>& in) {
  std::vector<int64_t> out = {in[0], layer.out_channels()};
  for (int d = 0; d < layer.kernel_size_size(); ++d) {
    const int64_t size = ConvOutputSize(
        in[2 + d], layer.kernel_size(d), DimOr(layer.stride(), d, 1), DimOr(layer.dilation(), d, 1),
        DimOr(layer.pad_before(), d, 0), DimOr(layer.pad_after(), d, 0));
    if (size < 1) return {};
    out.push_back(size);
  }
  return out;
}

int64_t LayerMacs(const v1::ConvLayer& layer, const std::vector<int64_t>& in,
                  const std::vector<int64_t>& out) {
  int64_t macs = NumElements(out) * (in[1] / Groups(layer));
  for (int32_t k : layer.kernel_size()) macs *= k;
  return macs;
}

// One layer on an input of `channels` channels: grouping, geometry,
// activation and whether it has a bias (`with_bias`) drawn independently.
// Parameters are left empty; the caller checks validity.
v1::ConvLayer DrawLayer(int64_t channels, int rank, bool aligned, const RandomGraphOptions& options,
                        Draws* draws, bool* with_bias) {
  const int64_t max_k = options.max_channels;
  const auto draw_channels = [&](int64_t multiple_of) {
    const int64_t step = aligned ? 8 : multiple_of;
    return step * draws->Int(1, std::max<int64_t>(1, max_k / step));
  };
  v1::ConvLayer layer;
  const double grouping = draws->Unit();
  if (grouping < 0.25) {
    // Depthwise: one group per input channel, channel multiplier 1-3.
    const int64_t multiplier =
        draws->Int(1, std::max<int64_t>(1, std::min<int64_t>(3, max_k / channels)));
    layer.set_groups(static_cast<int32_t>(channels));
    layer.set_out_channels(static_cast<int32_t>(channels * multiplier));
  } else if (grouping < 0.45 && channels % 2 == 0) {
    layer.set_groups(2);
    layer.set_out_channels(static_cast<int32_t>(draw_channels(2)));
  } else {
    // groups 0 and 1 both mean an ordinary convolution; send both.
    if (draws->Chance(0.5)) layer.set_groups(1);
    layer.set_out_channels(static_cast<int32_t>(draw_channels(1)));
  }
  const int64_t max_kernel = rank == 3 ? options.max_kernel_3d : options.max_kernel_2d;
  bool all_unit = true;
  for (int d = 0; d < rank; ++d) {
    const int64_t kernel = draws->Int(1, max_kernel);
    const int64_t stride = draws->Int(1, 2);
    const int64_t dilation = draws->Int(1, 2);
    // Each side independently up to the dilated kernel extent, so padding is
    // mostly asymmetric and sometimes wider than the window's reach.
    const int64_t extent = (kernel - 1) * dilation + 1;
    layer.add_kernel_size(static_cast<int32_t>(kernel));
    layer.add_stride(static_cast<int32_t>(stride));
    layer.add_dilation(static_cast<int32_t>(dilation));
    layer.add_pad_before(static_cast<int32_t>(draws->Int(0, extent)));
    layer.add_pad_after(static_cast<int32_t>(draws->Int(0, extent)));
    all_unit = all_unit && stride == 1 && dilation == 1;
  }
  // Empty stride and dilation mean 1 everywhere: send that form too.
  if (all_unit && draws->Chance(0.5)) {
    layer.clear_stride();
    layer.clear_dilation();
  }
  *layer.mutable_activation() = DrawActivation(draws);
  *with_bias = draws->Chance(0.7);
  return layer;
}

// Weights ~ 1/sqrt(fan_in) keep each pre-activation's scale near the input's
// through every layer, so float16 stays finite and the activations are
// exercised where they bend.
void FillLayerParameters(v1::DataType type, int64_t in_channels, bool with_bias,
                         v1::ConvLayer* layer, Draws* draws) {
  int64_t fan_in = in_channels / Groups(*layer);
  for (int32_t k : layer->kernel_size()) fan_in *= k;
  const double bound = std::sqrt(3.0 / static_cast<double>(fan_in));
  layer->set_weights(RandomBytes(type, layer->out_channels() * fan_in, bound, draws));
  if (with_bias) {
    layer->set_bias(RandomBytes(type, layer->out_channels(), 0.5, draws));
  }
}

// Whether the engine accepts `graph` for `input_shape`, as the server will.
absl::Status Validate(const v1::GraphDef& graph, const std::vector<int64_t>& input_shape) {
  v1::GraphDef copy = graph;
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> created = Graph::Create(*std::move(spec));
  if (!created.ok()) return created.status();
  return (*created)->InferShapes(input_shape).status();
}

std::optional<RandomGraphCase> TryDrawGraph(uint64_t seed, const RandomGraphOptions& options,
                                            Draws* draws) {
  static constexpr v1::DataType kTypes[] = {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16};
  RandomGraphCase drawn;
  drawn.seed = seed;
  v1::GraphDef& graph = drawn.graph;
  graph.set_name(absl::StrCat(options.name_prefix, "_", seed));
  graph.set_data_type(kTypes[draws->Int(0, 2)]);
  const bool three_d = draws->Chance(options.three_d_fraction);
  const bool channels_last = draws->Chance(0.5);
  graph.set_layout(three_d ? (channels_last ? v1::NDHWC : v1::NCDHW)
                           : (channels_last ? v1::NHWC : v1::NCHW));
  const int rank = three_d ? 3 : 2;
  const bool aligned =
      options.max_channels >= 8 && draws->Chance(options.aligned_channels_fraction);
  const int64_t in_channels =
      aligned ? 8 * draws->Int(1, options.max_channels / 8) : draws->Int(1, options.max_channels);
  graph.set_input_channels(static_cast<int32_t>(in_channels));

  std::vector<int64_t> shape = {1, in_channels};
  const int64_t max_spatial = three_d ? options.max_spatial_3d : options.max_spatial_2d;
  for (int d = 0; d < rank; ++d) shape.push_back(draws->Int(1, max_spatial));
  drawn.input_shape = shape;

  // Layers are drawn for batch 1; the batch then takes what the budget leaves.
  const int layers = static_cast<int>(draws->Int(1, options.max_layers));
  int64_t macs = 0;
  for (int i = 0; i < layers; ++i) {
    bool placed = false;
    for (int attempt = 0; attempt < kMaxLayerDraws && !placed; ++attempt) {
      bool with_bias = false;
      v1::ConvLayer layer = DrawLayer(shape[1], rank, aligned, options, draws, &with_bias);
      const std::vector<int64_t> out = LayerOutput(layer, shape);
      if (out.empty()) continue;
      const int64_t layer_macs = LayerMacs(layer, shape, out);
      if (macs + layer_macs > options.max_macs) continue;
      layer.set_name(absl::StrCat("layer", i));
      FillLayerParameters(graph.data_type(), shape[1], with_bias, &layer, draws);
      *graph.add_layers() = std::move(layer);
      macs += layer_macs;
      shape = out;
      placed = true;
    }
    if (!placed) return std::nullopt;
  }
  const int64_t max_batch = std::max<int64_t>(
      1, std::min(options.max_batch, options.max_macs / std::max<int64_t>(macs, 1)));
  drawn.input_shape[0] = draws->Int(1, max_batch);
  drawn.input = RandomBytes(graph.data_type(), NumElements(drawn.input_shape), 1.0, draws);
  if (!Validate(graph, drawn.input_shape).ok()) return std::nullopt;
  drawn.description = DescribeGraph(graph, drawn.input_shape, seed);
  return drawn;
}

std::string Dims(const google::protobuf::RepeatedField<int32_t>& values, int rank,
                 int64_t fallback) {
  std::vector<int64_t> dims;
  for (int d = 0; d < rank; ++d) dims.push_back(DimOr(values, d, fallback));
  return absl::StrJoin(dims, "x");
}

std::string DescribeActivation(const v1::Activation& a) {
  std::string text = v1::Activation::Kind_Name(a.kind());
  std::vector<std::string> params;
  if (a.has_upper_clip()) params.push_back(absl::StrCat("clip=", a.upper_clip()));
  if (a.negative_slope() != 0.0f) params.push_back(absl::StrCat("slope=", a.negative_slope()));
  if (a.has_alpha()) params.push_back(absl::StrCat("alpha=", a.alpha()));
  if (a.has_beta()) params.push_back(absl::StrCat("beta=", a.beta()));
  if (!params.empty()) absl::StrAppend(&text, "(", absl::StrJoin(params, ","), ")");
  return text;
}

}  // namespace

std::string DescribeGraph(const v1::GraphDef& graph, const std::vector<int64_t>& input_shape,
                          uint64_t seed) {
  std::string text = absl::StrCat(
      graph.name(), " seed=", seed, " ", v1::DataType_Name(graph.data_type()), " ",
      v1::Layout_Name(graph.layout()), " input=[", absl::StrJoin(input_shape, ","), "]");
  int64_t channels = graph.input_channels();
  for (int i = 0; i < graph.layers_size(); ++i) {
    const v1::ConvLayer& layer = graph.layers(i);
    const int rank = layer.kernel_size_size();
    const int64_t groups = Groups(layer);
    absl::StrAppend(
        &text, " | L", i, " K=", layer.out_channels(), " k=", Dims(layer.kernel_size(), rank, 1),
        " s=", Dims(layer.stride(), rank, 1), " d=", Dims(layer.dilation(), rank, 1),
        " pad=", Dims(layer.pad_before(), rank, 0), "/", Dims(layer.pad_after(), rank, 0),
        " g=", groups, groups > 1 && groups == channels ? "(dw)" : "",
        layer.bias().empty() ? " nobias " : " bias ", DescribeActivation(layer.activation()));
    channels = layer.out_channels();
  }
  return text;
}

int64_t GraphMacs(const v1::GraphDef& graph, const std::vector<int64_t>& input_shape) {
  int64_t macs = 0;
  std::vector<int64_t> shape = input_shape;
  for (const v1::ConvLayer& layer : graph.layers()) {
    const std::vector<int64_t> out = LayerOutput(layer, shape);
    if (out.empty()) return macs;
    macs += LayerMacs(layer, shape, out);
    shape = out;
  }
  return macs;
}

RandomGraphCase MakeRandomGraph(uint64_t seed, const RandomGraphOptions& options) {
  Draws draws(seed);
  for (int attempt = 0; attempt < kMaxGraphDraws; ++attempt) {
    std::optional<RandomGraphCase> drawn = TryDrawGraph(seed, options, &draws);
    if (drawn.has_value()) return *std::move(drawn);
  }
  std::fprintf(stderr,
               "MakeRandomGraph(seed %llu): no valid graph in %d draws; options too tight\n",
               static_cast<unsigned long long>(seed), kMaxGraphDraws);
  std::abort();
}

absl::StatusOr<RandomGraphCase> MakeGraphCase(v1::GraphDef graph, std::vector<int64_t> input_shape,
                                              uint64_t seed, bool with_bias) {
  absl::Status filled = FillParameters(seed, with_bias, &graph);
  if (!filled.ok()) return filled;
  absl::Status valid = Validate(graph, input_shape);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        graph.name(), " on input [", absl::StrJoin(input_shape, ","), "]: ", valid.message()));
  }
  RandomGraphCase made;
  made.seed = seed;
  Draws draws(seed);
  made.input = RandomBytes(graph.data_type(), NumElements(input_shape), 1.0, &draws);
  made.description = DescribeGraph(graph, input_shape, seed);
  made.input_shape = std::move(input_shape);
  made.graph = std::move(graph);
  return made;
}

}  // namespace convserve
