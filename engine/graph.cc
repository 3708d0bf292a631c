#include "engine/graph.h"

#include <openssl/evp.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/status_macros.h"

namespace convserve {

const char* ActivationName(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kIdentity:
      return "identity";
    case ActivationKind::kRelu:
      return "relu";
    case ActivationKind::kTanh:
      return "tanh";
    case ActivationKind::kSigmoid:
      return "sigmoid";
    case ActivationKind::kElu:
      return "elu";
    case ActivationKind::kGelu:
      return "gelu";
    case ActivationKind::kGeluTanh:
      return "gelu_tanh";
    case ActivationKind::kSoftplus:
      return "softplus";
    case ActivationKind::kSwish:
      return "swish";
  }
  return "unknown";
}

int64_t ConvOutputSize(int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                       int64_t pad_before, int64_t pad_after) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t padded = input + pad_before + pad_after;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", problem));
}

// Fills an optional per-dim list: empty -> `rank` copies of `fill`; otherwise
// it must have exactly `rank` entries within [min_value, max_value].
absl::Status NormalizeDims(const std::string& field, int64_t rank, int64_t fill,
                           int64_t min_value, int64_t max_value,
                           std::vector<int64_t>* dims) {
  if (dims->empty()) {
    dims->assign(rank, fill);
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(dims->size()) != rank) {
    return Invalid(field, absl::StrCat("has ", dims->size(), " entries; the graph has ", rank,
                                       " spatial dims"));
  }
  for (size_t i = 0; i < dims->size(); ++i) {
    const int64_t v = (*dims)[i];
    if (v < min_value || v > max_value) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("must be in [", min_value, ", ", max_value, "], got ", v));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateActivation(const std::string& field, const Activation& a) {
  const auto finite = [](float v) { return std::isfinite(v); };
  if (a.kind == ActivationKind::kRelu) {
    if (!finite(a.negative_slope)) {
      return Invalid(field + ".negative_slope", "must be finite");
    }
    if (a.has_upper_clip && (!finite(a.upper_clip) || a.upper_clip <= 0.0f)) {
      return Invalid(field + ".upper_clip", absl::StrCat("must be finite and > 0, got ",
                                                          a.upper_clip));
    }
  } else if (a.has_upper_clip || a.negative_slope != 0.0f) {
    return Invalid(field, absl::StrCat("upper_clip and negative_slope apply to relu only, not ",
                                       ActivationName(a.kind)));
  }
  if (a.kind == ActivationKind::kElu && !finite(a.alpha)) {
    return Invalid(field + ".alpha", "must be finite");
  }
  if ((a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish) &&
      (!finite(a.beta) || a.beta == 0.0f)) {
    return Invalid(field + ".beta", absl::StrCat("must be finite and non-zero, got ", a.beta));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayer(size_t index, int64_t in_channels, int64_t rank, DType dtype,
                           const GraphLimits& limits, ConvLayerSpec* layer) {
  const std::string f = absl::StrCat("layers[", index, "]");
  if (layer->out_channels < 1 || layer->out_channels > limits.max_channels) {
    return Invalid(f + ".out_channels", absl::StrCat("must be in [1, ", limits.max_channels,
                                                     "], got ", layer->out_channels));
  }
  if (layer->kernel_size.empty()) {
    return Invalid(f + ".kernel_size", absl::StrCat("is required (", rank, " entries)"));
  }
  RETURN_IF_ERROR(NormalizeDims(f + ".kernel_size", rank, 1, 1, limits.max_kernel_size,
                                &layer->kernel_size));
  RETURN_IF_ERROR(NormalizeDims(f + ".stride", rank, 1, 1, limits.max_stride, &layer->stride));
  RETURN_IF_ERROR(
      NormalizeDims(f + ".dilation", rank, 1, 1, limits.max_dilation, &layer->dilation));
  RETURN_IF_ERROR(
      NormalizeDims(f + ".pad_before", rank, 0, 0, limits.max_padding, &layer->pad_before));
  RETURN_IF_ERROR(
      NormalizeDims(f + ".pad_after", rank, 0, 0, limits.max_padding, &layer->pad_after));
  if (layer->groups == 0) layer->groups = 1;
  if (layer->groups < 0 || layer->groups > in_channels) {
    return Invalid(f + ".groups", absl::StrCat("must be in [1, ", in_channels,
                                               "] (the layer's input channels), got ",
                                               layer->groups));
  }
  if (in_channels % layer->groups != 0) {
    return Invalid(f + ".groups", absl::StrCat("(", layer->groups,
                                               ") must divide the layer's input channels (",
                                               in_channels, ")"));
  }
  if (layer->out_channels % layer->groups != 0) {
    return Invalid(f + ".groups", absl::StrCat("(", layer->groups,
                                               ") must divide out_channels (",
                                               layer->out_channels, ")"));
  }
  int64_t weight_count = layer->out_channels * (in_channels / layer->groups);
  for (int64_t k : layer->kernel_size) weight_count *= k;
  const int64_t weight_bytes = weight_count * static_cast<int64_t>(DTypeSize(dtype));
  if (static_cast<int64_t>(layer->weights.size()) != weight_bytes) {
    return Invalid(f + ".weights",
                   absl::StrCat("has ", layer->weights.size(), " bytes, expected ", weight_bytes,
                                " (K=", layer->out_channels,
                                " x C/groups=", in_channels / layer->groups, " x kernel ",
                                absl::StrJoin(layer->kernel_size, "x"), " x ", DTypeSize(dtype),
                                " bytes of ", DTypeName(dtype), ")"));
  }
  const int64_t bias_bytes = layer->out_channels * static_cast<int64_t>(DTypeSize(dtype));
  if (!layer->bias.empty() && static_cast<int64_t>(layer->bias.size()) != bias_bytes) {
    return Invalid(f + ".bias", absl::StrCat("has ", layer->bias.size(), " bytes, expected ",
                                             bias_bytes, " (K=", layer->out_channels, " x ",
                                             DTypeSize(dtype), " bytes of ", DTypeName(dtype),
                                             ") or none"));
  }
  std::vector<float> values(weight_count);
  ToFloat(dtype, layer->weights.data(), values.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Invalid(f + ".weights", absl::StrCat("holds a non-finite value at element ", i));
    }
  }
  if (!layer->bias.empty()) {
    values.resize(layer->out_channels);
    ToFloat(dtype, layer->bias.data(), values.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        return Invalid(f + ".bias", absl::StrCat("holds a non-finite value at element ", i));
      }
    }
  }
  return ValidateActivation(f + ".activation", layer->activation);
}

// Canonical bytes of a normalized spec: fixed field order, every value
// length-prefixed, so two specs hash equal exactly when they are equal.
class CanonicalWriter {
 public:
  void Int(int64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Float(float v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Bytes(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    bytes_.append(s);
  }
  void Ints(const std::vector<int64_t>& v) {
    Int(static_cast<int64_t>(v.size()));
    for (int64_t x : v) Int(x);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

std::string Fingerprint(const GraphSpec& spec) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  const auto update = [ctx](const std::string& s) { EVP_DigestUpdate(ctx, s.data(), s.size()); };
  CanonicalWriter header;
  header.Bytes("convserve.graph.v1");
  header.Bytes(spec.name);
  header.Int(static_cast<int64_t>(spec.dtype));
  header.Int(static_cast<int64_t>(spec.layout));
  header.Int(spec.input_channels);
  header.Int(spec.spatial_rank);
  header.Int(static_cast<int64_t>(spec.layers.size()));
  update(header.bytes());
  for (const ConvLayerSpec& layer : spec.layers) {
    CanonicalWriter w;
    w.Bytes(layer.name);
    w.Int(layer.out_channels);
    w.Ints(layer.kernel_size);
    w.Ints(layer.stride);
    w.Ints(layer.dilation);
    w.Ints(layer.pad_before);
    w.Ints(layer.pad_after);
    w.Int(layer.groups);
    const Activation& a = layer.activation;
    w.Int(static_cast<int64_t>(a.kind));
    w.Int(a.has_upper_clip ? 1 : 0);
    w.Float(a.has_upper_clip ? a.upper_clip : 0.0f);
    w.Float(a.negative_slope);
    w.Float(a.kind == ActivationKind::kElu ? a.alpha : 0.0f);
    const bool uses_beta =
        a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish;
    w.Float(uses_beta ? a.beta : 0.0f);
    w.Int(static_cast<int64_t>(layer.weights.size()));
    w.Int(static_cast<int64_t>(layer.bias.size()));
    update(w.bytes());
    update(layer.weights);
    update(layer.bias);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  // 128 bits are plenty to tell loaded graphs apart and stay readable.
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), 16));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Graph>> Graph::Create(GraphSpec spec,
                                                           const GraphLimits& limits) {
  if (spec.name.empty()) return Invalid("name", "is required");
  if (static_cast<int64_t>(spec.name.size()) > limits.max_name_length) {
    return Invalid("name", absl::StrCat("is ", spec.name.size(), " characters; at most ",
                                        limits.max_name_length, " allowed"));
  }
  for (char c : spec.name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return Invalid("name", absl::StrCat("'", absl::CHexEscape(spec.name),
                                          "' may hold only letters, digits, '_', '-' and '.'"));
    }
  }
  const int64_t layout_rank = SpatialRank(spec.layout);
  if (spec.spatial_rank == 0) spec.spatial_rank = layout_rank;
  if (spec.spatial_rank != layout_rank) {
    return Invalid("spatial_rank", absl::StrCat("is ", spec.spatial_rank, " but layout ",
                                                LayoutName(spec.layout), " has ", layout_rank,
                                                " spatial dims"));
  }
  if (spec.input_channels < 1 || spec.input_channels > limits.max_channels) {
    return Invalid("input_channels", absl::StrCat("must be in [1, ", limits.max_channels,
                                                  "], got ", spec.input_channels));
  }
  if (spec.layers.empty()) return Invalid("layers", "must hold at least one layer");
  if (static_cast<int64_t>(spec.layers.size()) > limits.max_layers) {
    return Invalid("layers", absl::StrCat("has ", spec.layers.size(), " layers; at most ",
                                          limits.max_layers, " allowed"));
  }
  int64_t in_channels = spec.input_channels;
  int64_t parameter_bytes = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    RETURN_IF_ERROR(ValidateLayer(i, in_channels, spec.spatial_rank, spec.dtype, limits,
                                  &spec.layers[i]));
    parameter_bytes += spec.layers[i].weights.size() + spec.layers[i].bias.size();
    in_channels = spec.layers[i].out_channels;
  }
  if (parameter_bytes > limits.max_parameter_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("graph parameters take ", parameter_bytes, " bytes; at most ",
                     limits.max_parameter_bytes, " allowed"));
  }
  std::string id = Fingerprint(spec);
  return std::shared_ptr<const Graph>(
      new Graph(std::move(spec), limits, std::move(id), parameter_bytes));
}

int64_t Graph::LayerInputChannels(size_t i) const {
  return i == 0 ? spec_.input_channels : spec_.layers[i - 1].out_channels;
}

Shape Graph::WeightShape(size_t i) const {
  const ConvLayerSpec& layer = spec_.layers[i];
  Shape shape = {layer.out_channels, LayerInputChannels(i) / layer.groups};
  shape.insert(shape.end(), layer.kernel_size.begin(), layer.kernel_size.end());
  return shape;
}

absl::StatusOr<std::vector<Shape>> Graph::InferShapes(const Shape& input_shape) const {
  const size_t rank = 2 + spec_.spatial_rank;
  if (input_shape.size() != rank) {
    return Invalid("input shape", absl::StrCat(ShapeToString(input_shape), " has ",
                                               input_shape.size(), " dims; graph '", name(),
                                               "' takes ", rank, " (N, C, ",
                                               spatial_rank() == 3 ? "D, " : "", "H, W)"));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (input_shape[d] < 1) {
      return Invalid("input shape", absl::StrCat(ShapeToString(input_shape), " has dim ", d,
                                                 " = ", input_shape[d], "; every dim must be >= 1"));
    }
  }
  if (input_shape[1] != spec_.input_channels) {
    return Invalid("input shape", absl::StrCat(ShapeToString(input_shape), " has C = ",
                                               input_shape[1], "; graph '", name(),
                                               "' takes C = ", spec_.input_channels));
  }
  const int64_t element_bytes = DTypeSize(spec_.dtype);
  const auto check_bytes = [&](const Shape& shape, const std::string& what) -> absl::Status {
    // Divide rather than multiply so huge dims cannot overflow.
    int64_t elements = 1;
    for (int64_t d : shape) {
      if (d > limits_.max_tensor_bytes / element_bytes / elements) {
        return absl::ResourceExhaustedError(
            absl::StrCat(what, " ", ShapeToString(shape), " exceeds the limit of ",
                         limits_.max_tensor_bytes, " bytes per tensor"));
      }
      elements *= d;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_bytes(input_shape, "input tensor"));
  std::vector<Shape> outputs;
  Shape current = input_shape;
  for (size_t i = 0; i < spec_.layers.size(); ++i) {
    const ConvLayerSpec& layer = spec_.layers[i];
    Shape next = {current[0], layer.out_channels};
    for (int d = 0; d < spatial_rank(); ++d) {
      const int64_t out = ConvOutputSize(current[2 + d], layer.kernel_size[d], layer.stride[d],
                                         layer.dilation[d], layer.pad_before[d],
                                         layer.pad_after[d]);
      if (out < 1) {
        return Invalid("input shape",
                       absl::StrCat(ShapeToString(input_shape), " is too small: layers[", i,
                                    "] gets spatial dim ", d, " = ", current[2 + d],
                                    ", smaller than its dilated kernel (",
                                    layer.dilation[d] * (layer.kernel_size[d] - 1) + 1,
                                    ") after padding"));
      }
      next.push_back(out);
    }
    RETURN_IF_ERROR(check_bytes(next, absl::StrCat("layers[", i, "] output")));
    outputs.push_back(next);
    current = std::move(next);
  }
  return outputs;
}

}  // namespace convserve
