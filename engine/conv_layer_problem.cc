#include "engine/conv_layer_problem.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

constexpr ActivationKind kActivationKinds[] = {
    ActivationKind::kIdentity, ActivationKind::kRelu,    ActivationKind::kTanh,
    ActivationKind::kSigmoid,  ActivationKind::kElu,     ActivationKind::kGelu,
    ActivationKind::kGeluTanh, ActivationKind::kSoftplus, ActivationKind::kSwish};

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// %.9g round-trips every float exactly.
std::string FloatText(float value) { return absl::StrFormat("%.9g", value); }

absl::Status InvalidField(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("layer problem field '", field, "' ", why));
}

absl::StatusOr<std::vector<int64_t>> ParseInts(absl::string_view field, absl::string_view text) {
  std::vector<int64_t> values;
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) return InvalidField(field, absl::StrCat("has '", part, "'"));
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<float> ParseFloat(absl::string_view field, absl::string_view text) {
  float value = 0;
  if (!absl::SimpleAtof(text, &value) || !std::isfinite(value)) {
    return InvalidField(field, absl::StrCat("is not a finite number: '", text, "'"));
  }
  return value;
}

}  // namespace

int64_t ConvLayerProblem::MacCount() const {
  int64_t per_output = 1;
  for (size_t d = 1; d < weights.size(); ++d) per_output *= weights[d];
  return NumElements(output) * per_output;
}

std::string ConvLayerProblem::Describe() const {
  return absl::StrCat(DTypeName(dtype), channels_last ? " channels-last" : " channels-first",
                      " x", ShapeToString(input), " w", ShapeToString(weights), " y",
                      ShapeToString(output), " stride [", absl::StrJoin(stride, ","),
                      "] dilation [", absl::StrJoin(dilation, ","), "] pad [",
                      absl::StrJoin(pad_before, ","), "]/[", absl::StrJoin(pad_after, ","), "]",
                      has_bias ? " +bias" : "", " ", ActivationName(activation.kind));
}

std::string ConvLayerProblem::Encode() const {
  const Activation& a = activation;
  return absl::StrCat(
      "dtype=", DTypeName(dtype), ";layout=", channels_last ? "cl" : "cf",
      ";x=", absl::StrJoin(input, ","), ";w=", absl::StrJoin(weights, ","),
      ";y=", absl::StrJoin(output, ","), ";stride=", absl::StrJoin(stride, ","),
      ";dilation=", absl::StrJoin(dilation, ","), ";pad_before=", absl::StrJoin(pad_before, ","),
      ";pad_after=", absl::StrJoin(pad_after, ","), ";bias=", has_bias ? 1 : 0,
      ";act=", ActivationName(a.kind),
      ";clip=", a.has_upper_clip ? FloatText(a.upper_clip) : "none",
      ";slope=", FloatText(a.negative_slope), ";alpha=", FloatText(a.alpha),
      ";beta=", FloatText(a.beta));
}

absl::StatusOr<ConvLayerProblem> ConvLayerProblem::Parse(absl::string_view text) {
  std::map<std::string, std::string> fields;
  for (absl::string_view item : absl::StrSplit(text, ';')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first.empty() || !fields.emplace(kv.first, kv.second).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer problem has an empty or repeated field in '", item, "'"));
    }
  }
  static const char* const kFields[] = {"dtype", "layout",    "x",          "w",
                                        "y",     "stride",    "dilation",   "pad_before",
                                        "pad_after", "bias",  "act",        "clip",
                                        "slope", "alpha",     "beta"};
  for (const char* name : kFields) {
    if (fields.count(name) == 0) return InvalidField(name, "is missing");
  }
  if (fields.size() != sizeof(kFields) / sizeof(kFields[0])) {
    return absl::InvalidArgumentError(absl::StrCat("layer problem has unknown fields: ", text));
  }
  ConvLayerProblem p;
  bool dtype_found = false;
  for (DType dtype : kDTypes) {
    if (fields["dtype"] == DTypeName(dtype)) {
      p.dtype = dtype;
      dtype_found = true;
    }
  }
  if (!dtype_found) return InvalidField("dtype", absl::StrCat("is unknown: '", fields["dtype"], "'"));
  if (fields["layout"] != "cl" && fields["layout"] != "cf") return InvalidField("layout", "is not cl or cf");
  p.channels_last = fields["layout"] == "cl";
  ASSIGN_OR_RETURN(p.input, ParseInts("x", fields["x"]));
  ASSIGN_OR_RETURN(p.weights, ParseInts("w", fields["w"]));
  ASSIGN_OR_RETURN(p.output, ParseInts("y", fields["y"]));
  ASSIGN_OR_RETURN(p.stride, ParseInts("stride", fields["stride"]));
  ASSIGN_OR_RETURN(p.dilation, ParseInts("dilation", fields["dilation"]));
  ASSIGN_OR_RETURN(p.pad_before, ParseInts("pad_before", fields["pad_before"]));
  ASSIGN_OR_RETURN(p.pad_after, ParseInts("pad_after", fields["pad_after"]));
  if (fields["bias"] != "0" && fields["bias"] != "1") return InvalidField("bias", "is not 0 or 1");
  p.has_bias = fields["bias"] == "1";
  bool act_found = false;
  for (ActivationKind kind : kActivationKinds) {
    if (fields["act"] == ActivationName(kind)) {
      p.activation.kind = kind;
      act_found = true;
    }
  }
  if (!act_found) return InvalidField("act", absl::StrCat("is unknown: '", fields["act"], "'"));
  if (fields["clip"] != "none") {
    p.activation.has_upper_clip = true;
    ASSIGN_OR_RETURN(p.activation.upper_clip, ParseFloat("clip", fields["clip"]));
  }
  ASSIGN_OR_RETURN(p.activation.negative_slope, ParseFloat("slope", fields["slope"]));
  ASSIGN_OR_RETURN(p.activation.alpha, ParseFloat("alpha", fields["alpha"]));
  ASSIGN_OR_RETURN(p.activation.beta, ParseFloat("beta", fields["beta"]));

  // Consistency: the text crosses a process boundary, so nothing is assumed.
  const size_t rank = p.stride.size();
  if (rank < 1 || rank > 3) return InvalidField("stride", "must have 1 to 3 spatial dims");
  for (const auto* dims : {&p.input, &p.weights, &p.output}) {
    if (dims->size() != rank + 2) return InvalidField("x/w/y", "ranks differ from the stride's");
    for (int64_t d : *dims) {
      if (d < 1 || d > (int64_t{1} << 31)) return InvalidField("x/w/y", "has a dim out of range");
    }
  }
  for (const auto* v : {&p.dilation, &p.pad_before, &p.pad_after}) {
    if (v->size() != rank) return InvalidField("dilation/pads", "ranks differ from the stride's");
  }
  if (p.output[0] != p.input[0] || p.output[1] != p.weights[0] ||
      p.input[1] % p.weights[1] != 0 || p.weights[0] % (p.input[1] / p.weights[1]) != 0) {
    return InvalidField("x/w/y", "batch, channel or group counts disagree");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (p.stride[d] < 1 || p.dilation[d] < 1 || p.pad_before[d] < 0 || p.pad_after[d] < 0) {
      return InvalidField("stride/dilation/pads", "out of range");
    }
    if (ConvOutputSize(p.input[2 + d], p.weights[2 + d], p.stride[d], p.dilation[d],
                       p.pad_before[d], p.pad_after[d]) != p.output[2 + d]) {
      return InvalidField("y", absl::StrCat("spatial dim ", d, " does not follow from x and w"));
    }
  }
  return p;
}

ConvLayerProblem MakeLayerProblem(const Graph& graph, size_t i, Shape input, Shape output) {
  const GraphSpec& spec = graph.spec();
  const ConvLayerSpec& layer = spec.layers[i];
  ConvLayerProblem problem;
  problem.dtype = spec.dtype;
  problem.channels_last = IsChannelsLast(spec.layout);
  problem.input = std::move(input);
  problem.weights = graph.WeightShape(i);
  problem.output = std::move(output);
  problem.stride = layer.stride;
  problem.dilation = layer.dilation;
  problem.pad_before = layer.pad_before;
  problem.pad_after = layer.pad_after;
  problem.has_bias = !layer.bias.empty();
  problem.activation = layer.activation;
  return problem;
}

std::vector<ConvLayerProblem> MakeLayerProblems(const Graph& graph, const Shape& input_shape,
                                                const std::vector<Shape>& outputs) {
  std::vector<ConvLayerProblem> problems;
  Shape layer_input = input_shape;
  for (size_t i = 0; i < graph.spec().layers.size(); ++i) {
    problems.push_back(MakeLayerProblem(graph, i, layer_input, outputs[i]));
    layer_input = outputs[i];
  }
  return problems;
}

}  // namespace convserve
