#include "client/reference_graph.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

absl::StatusOr<Layout> LayoutFromDef(v1::Layout layout) {
  switch (layout) {
    case v1::NCHW:
      return Layout::kNCHW;
    case v1::NHWC:
      return Layout::kNHWC;
    case v1::NCDHW:
      return Layout::kNCDHW;
    case v1::NDHWC:
      return Layout::kNDHWC;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("layout: NCHW, NHWC, NCDHW or NDHWC, not ", static_cast<int>(layout)));
  }
}

absl::StatusOr<Activation> ActivationFromDef(const v1::Activation& proto, int layer) {
  // v1::Activation::Kind and ActivationKind list the functions in the same
  // order (the server converts them the same way).
  if (!v1::Activation::Kind_IsValid(proto.kind())) {
    return absl::InvalidArgumentError(absl::StrCat("layers[", layer, "].activation.kind ",
                                                   static_cast<int>(proto.kind()), " is unknown"));
  }
  Activation a;
  a.kind = static_cast<ActivationKind>(static_cast<int>(proto.kind()));
  a.has_upper_clip = proto.has_upper_clip();
  a.upper_clip = proto.upper_clip();
  a.negative_slope = proto.negative_slope();
  if (proto.has_alpha()) a.alpha = proto.alpha();
  if (proto.has_beta()) a.beta = proto.beta();
  return a;
}

}  // namespace

absl::StatusOr<DType> DTypeFromDef(v1::DataType type) {
  switch (type) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("data_type: FLOAT32, FLOAT16 or BFLOAT16, not ", static_cast<int>(type)));
  }
}

absl::StatusOr<std::shared_ptr<const Graph>> ReferenceGraph(const v1::GraphDef& definition) {
  GraphSpec spec;
  spec.name = definition.name();
  absl::StatusOr<DType> dtype = DTypeFromDef(definition.data_type());
  if (!dtype.ok()) return dtype.status();
  spec.dtype = *dtype;
  absl::StatusOr<Layout> layout = LayoutFromDef(definition.layout());
  if (!layout.ok()) return layout.status();
  spec.layout = *layout;
  spec.input_channels = definition.input_channels();
  spec.spatial_rank = definition.spatial_rank();
  for (int i = 0; i < definition.layers_size(); ++i) {
    const v1::ConvLayer& proto = definition.layers(i);
    ConvLayerSpec layer;
    layer.name = proto.name();
    layer.out_channels = proto.out_channels();
    layer.kernel_size = ToVector(proto.kernel_size());
    layer.stride = ToVector(proto.stride());
    layer.dilation = ToVector(proto.dilation());
    layer.pad_before = ToVector(proto.pad_before());
    layer.pad_after = ToVector(proto.pad_after());
    layer.groups = proto.groups();
    layer.weights = proto.weights();
    layer.bias = proto.bias();
    absl::StatusOr<Activation> activation = ActivationFromDef(proto.activation(), i);
    if (!activation.ok()) return activation.status();
    layer.activation = *activation;
    spec.layers.push_back(std::move(layer));
  }
  return Graph::Create(std::move(spec));
}

}  // namespace convserve
