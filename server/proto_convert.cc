#include "server/proto_convert.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", problem));
}

absl::StatusOr<Layout> LayoutFromProto(v1::Layout layout, const std::string& field) {
  switch (layout) {
    case v1::NCHW:
      return Layout::kNCHW;
    case v1::NHWC:
      return Layout::kNHWC;
    case v1::NCDHW:
      return Layout::kNCDHW;
    case v1::NDHWC:
      return Layout::kNDHWC;
    case v1::LAYOUT_UNSPECIFIED:
      return Invalid(field, "is required: NCHW, NHWC, NCDHW or NDHWC");
    default:
      return Invalid(field, absl::StrCat("has unknown value ", static_cast<int>(layout)));
  }
}

absl::StatusOr<Activation> ActivationFromProto(const v1::Activation& proto,
                                               const std::string& field) {
  Activation a;
  switch (proto.kind()) {
    case v1::Activation::IDENTITY:
      a.kind = ActivationKind::kIdentity;
      break;
    case v1::Activation::RELU:
      a.kind = ActivationKind::kRelu;
      break;
    case v1::Activation::TANH:
      a.kind = ActivationKind::kTanh;
      break;
    case v1::Activation::SIGMOID:
      a.kind = ActivationKind::kSigmoid;
      break;
    case v1::Activation::ELU:
      a.kind = ActivationKind::kElu;
      break;
    case v1::Activation::GELU:
      a.kind = ActivationKind::kGelu;
      break;
    case v1::Activation::GELU_TANH:
      a.kind = ActivationKind::kGeluTanh;
      break;
    case v1::Activation::SOFTPLUS:
      a.kind = ActivationKind::kSoftplus;
      break;
    case v1::Activation::SWISH:
      a.kind = ActivationKind::kSwish;
      break;
    default:
      return Invalid(field + ".kind", absl::StrCat("has unknown value ",
                                                   static_cast<int>(proto.kind())));
  }
  a.has_upper_clip = proto.has_upper_clip();
  a.upper_clip = proto.upper_clip();
  a.negative_slope = proto.negative_slope();
  const bool uses_alpha = a.kind == ActivationKind::kElu;
  const bool uses_beta = a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish;
  if (proto.has_alpha() && !uses_alpha) {
    return Invalid(field + ".alpha", absl::StrCat("applies to elu only, not ",
                                                  ActivationName(a.kind)));
  }
  if (proto.has_beta() && !uses_beta) {
    return Invalid(field + ".beta", absl::StrCat("applies to softplus and swish only, not ",
                                                 ActivationName(a.kind)));
  }
  if (proto.has_alpha()) a.alpha = proto.alpha();
  if (proto.has_beta()) a.beta = proto.beta();
  return a;
}

v1::Activation ActivationToProto(const Activation& a) {
  v1::Activation proto;
  proto.set_kind(static_cast<v1::Activation::Kind>(static_cast<int>(a.kind)));
  if (a.has_upper_clip) proto.set_upper_clip(a.upper_clip);
  proto.set_negative_slope(a.negative_slope);
  if (a.kind == ActivationKind::kElu) proto.set_alpha(a.alpha);
  if (a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish) {
    proto.set_beta(a.beta);
  }
  return proto;
}

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

// Generated *_Name() returns "" for a value outside the enum, which would
// blank the message exactly where the user needs to see the value.
std::string NameForMessage(v1::DataType type) {
  const std::string& name = v1::DataType_Name(type);
  return name.empty() ? absl::StrCat("unknown value ", static_cast<int>(type)) : name;
}

std::string NameForMessage(v1::Layout layout) {
  const std::string& name = v1::Layout_Name(layout);
  return name.empty() ? absl::StrCat("unknown value ", static_cast<int>(layout)) : name;
}

absl::Span<const uint8_t> BytesOf(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace

absl::StatusOr<DType> DTypeFromProto(v1::DataType type, const std::string& field) {
  switch (type) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    case v1::DATA_TYPE_UNSPECIFIED:
      return Invalid(field, "is required: FLOAT32, FLOAT16 or BFLOAT16");
    default:
      return Invalid(field, absl::StrCat("has unknown value ", static_cast<int>(type)));
  }
}

absl::StatusOr<GraphSpec> GraphSpecFromProto(v1::GraphDef* graph) {
  GraphSpec spec;
  spec.name = graph->name();
  ASSIGN_OR_RETURN(spec.dtype, DTypeFromProto(graph->data_type(), "data_type"));
  ASSIGN_OR_RETURN(spec.layout, LayoutFromProto(graph->layout(), "layout"));
  spec.input_channels = graph->input_channels();
  spec.spatial_rank = graph->spatial_rank();
  for (int i = 0; i < graph->layers_size(); ++i) {
    v1::ConvLayer* proto = graph->mutable_layers(i);
    ConvLayerSpec layer;
    layer.name = proto->name();
    layer.out_channels = proto->out_channels();
    layer.kernel_size = ToVector(proto->kernel_size());
    layer.stride = ToVector(proto->stride());
    layer.dilation = ToVector(proto->dilation());
    layer.pad_before = ToVector(proto->pad_before());
    layer.pad_after = ToVector(proto->pad_after());
    layer.groups = proto->groups();
    layer.weights = std::move(*proto->mutable_weights());
    layer.bias = std::move(*proto->mutable_bias());
    ASSIGN_OR_RETURN(layer.activation,
                     ActivationFromProto(proto->activation(),
                                         absl::StrCat("layers[", i, "].activation")));
    spec.layers.push_back(std::move(layer));
  }
  return spec;
}

v1::DataType DataTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kFloat16:
      return v1::FLOAT16;
    case DType::kBFloat16:
      return v1::BFLOAT16;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

v1::Layout LayoutToProto(Layout layout) {
  switch (layout) {
    case Layout::kNCHW:
      return v1::NCHW;
    case Layout::kNHWC:
      return v1::NHWC;
    case Layout::kNCDHW:
      return v1::NCDHW;
    case Layout::kNDHWC:
      return v1::NDHWC;
  }
  return v1::LAYOUT_UNSPECIFIED;
}

DynamicBatchingOptions DynamicBatchingFromProto(const v1::DynamicBatching& proto,
                                                const DynamicBatchingOptions& defaults) {
  DynamicBatchingOptions batching = defaults;
  if (proto.has_max_batch_size()) batching.max_batch_size = proto.max_batch_size();
  if (proto.has_max_queue_delay_microseconds()) {
    batching.max_queue_delay = absl::Microseconds(proto.max_queue_delay_microseconds());
  }
  if (proto.preferred_batch_size_size() > 0) {
    batching.preferred_batch_sizes.assign(proto.preferred_batch_size().begin(),
                                          proto.preferred_batch_size().end());
  }
  if (proto.has_dispatch_when_idle()) batching.dispatch_when_idle = proto.dispatch_when_idle();
  return batching;
}

void DynamicBatchingToProto(const DynamicBatchingOptions& batching, v1::DynamicBatching* proto) {
  proto->set_max_batch_size(static_cast<int32_t>(batching.max_batch_size));
  proto->set_max_queue_delay_microseconds(absl::ToInt64Microseconds(batching.max_queue_delay));
  for (int64_t size : batching.preferred_batch_sizes) {
    proto->add_preferred_batch_size(static_cast<int32_t>(size));
  }
  proto->set_dispatch_when_idle(batching.dispatch_when_idle);
}

void GraphInfoToProto(const Graph& graph, v1::GraphInfo* info,
                      const DynamicBatchingOptions* batching) {
  if (batching != nullptr) DynamicBatchingToProto(*batching, info->mutable_dynamic_batching());
  const GraphSpec& spec = graph.spec();
  info->set_id(graph.id());
  info->set_parameter_bytes(graph.parameter_bytes());
  v1::GraphDef* def = info->mutable_definition();
  def->set_name(spec.name);
  def->set_data_type(DataTypeToProto(spec.dtype));
  def->set_layout(LayoutToProto(spec.layout));
  def->set_input_channels(spec.input_channels);
  def->set_spatial_rank(spec.spatial_rank);
  for (const ConvLayerSpec& layer : spec.layers) {
    v1::ConvLayer* proto = def->add_layers();
    proto->set_name(layer.name);
    proto->set_out_channels(layer.out_channels);
    for (int64_t v : layer.kernel_size) proto->add_kernel_size(v);
    for (int64_t v : layer.stride) proto->add_stride(v);
    for (int64_t v : layer.dilation) proto->add_dilation(v);
    for (int64_t v : layer.pad_before) proto->add_pad_before(v);
    for (int64_t v : layer.pad_after) proto->add_pad_after(v);
    proto->set_groups(layer.groups);
    *proto->mutable_activation() = ActivationToProto(layer.activation);
    info->add_has_bias(!layer.bias.empty());
  }
}

absl::StatusOr<WireTensor> InferInputFromProto(const Graph& graph,
                                               const v1::InferRequest& request,
                                               const std::vector<TensorMemory>* data) {
  if (!request.has_input()) return Invalid("input", "is required");
  const v1::Tensor& input = request.input();
  const GraphSpec& spec = graph.spec();
  if (input.data_type() != v1::DATA_TYPE_UNSPECIFIED &&
      input.data_type() != DataTypeToProto(spec.dtype)) {
    return Invalid("input.data_type",
                   absl::StrCat("is ", NameForMessage(input.data_type()), "; graph '",
                                graph.name(), "' takes ",
                                v1::DataType_Name(DataTypeToProto(spec.dtype))));
  }
  if (input.layout() != v1::LAYOUT_UNSPECIFIED && input.layout() != LayoutToProto(spec.layout)) {
    return Invalid("input.layout", absl::StrCat("is ", NameForMessage(input.layout()),
                                                "; graph '", graph.name(), "' takes ",
                                                LayoutName(spec.layout)));
  }
  if (input.shape_size() == 0) return Invalid("input.shape", "is required (N, C, H, W)");
  if (data != nullptr) {
    if (data->size() > 1) return Invalid("input.data", "appears more than once");
    if (data->empty()) return WireTensor{ToVector(input.shape()), {}};
    return WireTensor{ToVector(input.shape()),
                      absl::MakeConstSpan(data->front().data, data->front().bytes)};
  }
  return WireTensor{ToVector(input.shape()), BytesOf(input.data())};
}

std::string KServeDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "FP32";
    case DType::kFloat16:
      return "FP16";
    case DType::kBFloat16:
      return "BF16";
  }
  return "";
}

Shape KServeShape(const Graph& graph, const Shape& logical) {
  return PhysicalShape(logical, IsChannelsLast(graph.spec().layout));
}

void KServeMetadataToProto(const Graph& graph, inference::ModelMetadataResponse* response) {
  const GraphSpec& spec = graph.spec();
  response->set_name(graph.name());
  response->add_versions("1");
  response->set_platform("convserve");
  const auto add = [&](google::protobuf::RepeatedPtrField<
                           inference::ModelMetadataResponse::TensorMetadata>* tensors,
                       const char* name, int64_t channels) {
    auto* tensor = tensors->Add();
    tensor->set_name(name);
    tensor->set_datatype(KServeDataType(spec.dtype));
    Shape logical(2 + spec.spatial_rank, -1);
    logical[1] = channels;
    for (int64_t d : KServeShape(graph, logical)) tensor->add_shape(d);
  };
  add(response->mutable_inputs(), kInputName, spec.input_channels);
  add(response->mutable_outputs(), kOutputName, spec.layers.back().out_channels);
}

absl::StatusOr<WireTensor> KServeInputFromProto(const Graph& graph,
                                                const inference::ModelInferRequest& request,
                                                const std::vector<TensorMemory>* raw_inputs) {
  const int raw_count = raw_inputs != nullptr ? static_cast<int>(raw_inputs->size())
                                              : request.raw_input_contents_size();
  if (request.inputs_size() != 1) {
    return Invalid("inputs", absl::StrCat("holds ", request.inputs_size(),
                                          " tensors; the model takes exactly one, named '",
                                          kInputName, "'"));
  }
  const auto& input = request.inputs(0);
  if (input.name() != kInputName) {
    return Invalid("inputs[0].name", absl::StrCat("is '", input.name(), "'; the model's input is '",
                                                  kInputName, "'"));
  }
  const DType dtype = graph.spec().dtype;
  if (input.datatype() != KServeDataType(dtype)) {
    return Invalid("inputs[0].datatype", absl::StrCat("is '", input.datatype(), "'; model '",
                                                      graph.name(), "' takes ",
                                                      KServeDataType(dtype)));
  }
  const size_t rank = 2 + graph.spatial_rank();
  if (static_cast<size_t>(input.shape_size()) != rank) {
    return Invalid("inputs[0].shape",
                   absl::StrCat("[", absl::StrJoin(input.shape(), ", "), "] has ",
                                input.shape_size(), " dims; model '", graph.name(), "' takes ",
                                rank, " in ", LayoutName(graph.spec().layout), " order"));
  }
  Shape physical = ToVector(input.shape());
  // Checked here in the order the client sent the dims: once reordered to
  // N, C, ..., the engine's dim numbers would not match the request's.
  for (size_t d = 0; d < rank; ++d) {
    if (physical[d] < 1) {
      return Invalid("inputs[0].shape",
                     absl::StrCat("[", absl::StrJoin(physical, ", "), "] has dim ", d, " = ",
                                  physical[d], "; every dim must be >= 1"));
    }
  }
  const size_t channel_dim = IsChannelsLast(graph.spec().layout) ? rank - 1 : 1;
  if (physical[channel_dim] != graph.spec().input_channels) {
    return Invalid("inputs[0].shape",
                   absl::StrCat("[", absl::StrJoin(physical, ", "), "] has C = ",
                                physical[channel_dim], " at dim ", channel_dim, " (",
                                LayoutName(graph.spec().layout), " order); model '", graph.name(),
                                "' takes C = ", graph.spec().input_channels));
  }
  Shape logical = physical;
  if (IsChannelsLast(graph.spec().layout)) {
    logical = {physical[0], physical[rank - 1]};
    logical.insert(logical.end(), physical.begin() + 1, physical.end() - 1);
  }
  absl::StatusOr<std::optional<SharedMemoryRef>> shared =
      KServeSharedMemoryRef(input.parameters(), "inputs[0].parameters");
  if (!shared.ok()) return shared.status();
  if (shared->has_value()) {
    if (raw_count > 0 || input.has_contents()) {
      return Invalid("inputs[0]", "is in shared memory (shared_memory_region); "
                                  "raw_input_contents and contents must then be empty");
    }
    WireTensor tensor;
    tensor.shape = std::move(logical);
    tensor.shared_memory = **shared;
    return tensor;
  }
  if (raw_count > 0) {
    if (raw_count != 1) {
      return Invalid("raw_input_contents",
                     absl::StrCat("holds ", raw_count, " entries; expected one per input (1)"));
    }
    if (input.has_contents()) {
      return Invalid("inputs[0].contents", "must be empty when raw_input_contents is used");
    }
    if (raw_inputs != nullptr) {
      const TensorMemory& raw = raw_inputs->front();
      WireTensor tensor{std::move(logical), absl::MakeConstSpan(raw.data, raw.bytes)};
      return tensor;
    }
    return WireTensor{std::move(logical), BytesOf(request.raw_input_contents(0))};
  }
  if (dtype == DType::kFloat32 && input.contents().fp32_contents_size() > 0) {
    const auto& values = input.contents().fp32_contents();
    return WireTensor{std::move(logical),
                      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(values.data()),
                                          values.size() * sizeof(float))};
  }
  if (input.has_contents()) {
    // Only FP32 has a typed field here; FP16/BF16 travel as raw bytes, since
    // a float -> half conversion on the server would hide the client's rounding.
    if (dtype == DType::kFloat32) {
      return Invalid("inputs[0].contents",
                     absl::StrCat("holds no fp32_contents; model '", graph.name(),
                                  "' takes FP32 values there or bytes in raw_input_contents"));
    }
    return Invalid("inputs[0].contents",
                   absl::StrCat("is for FP32 models only; model '", graph.name(), "' takes ",
                                KServeDataType(dtype),
                                ": send the tensor's bytes in raw_input_contents"));
  }
  return Invalid("raw_input_contents", absl::StrCat("is empty; send the tensor bytes there",
                                                    dtype == DType::kFloat32
                                                        ? " or in inputs[0].contents.fp32_contents"
                                                        : ""));
}

absl::StatusOr<std::optional<SharedMemoryRef>> CheckKServeOutputs(
    const inference::ModelInferRequest& request) {
  std::optional<SharedMemoryRef> shared;
  for (int i = 0; i < request.outputs_size(); ++i) {
    if (request.outputs(i).name() != kOutputName) {
      return Invalid(absl::StrCat("outputs[", i, "].name"),
                     absl::StrCat("is '", request.outputs(i).name(),
                                  "'; the model's only output is '", kOutputName, "'"));
    }
    absl::StatusOr<std::optional<SharedMemoryRef>> ref = KServeSharedMemoryRef(
        request.outputs(i).parameters(), absl::StrCat("outputs[", i, "].parameters"));
    if (!ref.ok()) return ref.status();
    if (ref->has_value()) shared = **ref;
  }
  return shared;
}

absl::StatusOr<std::optional<SharedMemoryRef>> KServeSharedMemoryRef(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    const std::string& field) {
  const auto region = parameters.find("shared_memory_region");
  if (region == parameters.end()) {
    if (parameters.count("shared_memory_byte_size") > 0 ||
        parameters.count("shared_memory_offset") > 0) {
      return Invalid(field, "has shared_memory_byte_size or _offset but no shared_memory_region");
    }
    return std::optional<SharedMemoryRef>();
  }
  if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam ||
      region->second.string_param().empty()) {
    return Invalid(field + "[shared_memory_region]", "must be a non-empty string_param");
  }
  SharedMemoryRef ref;
  ref.region = region->second.string_param();
  const auto size = parameters.find("shared_memory_byte_size");
  if (size == parameters.end() ||
      size->second.parameter_choice_case() != inference::InferParameter::kInt64Param ||
      size->second.int64_param() <= 0) {
    return Invalid(field + "[shared_memory_byte_size]",
                   "is required with shared_memory_region: an int64_param > 0");
  }
  ref.byte_size = static_cast<uint64_t>(size->second.int64_param());
  const auto offset = parameters.find("shared_memory_offset");
  if (offset != parameters.end()) {
    if (offset->second.parameter_choice_case() != inference::InferParameter::kInt64Param ||
        offset->second.int64_param() < 0) {
      return Invalid(field + "[shared_memory_offset]", "must be an int64_param >= 0");
    }
    ref.offset = static_cast<uint64_t>(offset->second.int64_param());
  }
  return std::optional<SharedMemoryRef>(std::move(ref));
}

}  // namespace convserve
