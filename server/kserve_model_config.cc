#include "server/kserve_model_config.h"

#include "absl/strings/str_cat.h"
#include "server/proto_convert.h"

namespace convserve {
namespace {

inference::DataType ModelDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return inference::TYPE_FP32;
    case DType::kFloat16:
      return inference::TYPE_FP16;
    case DType::kBFloat16:
      return inference::TYPE_BF16;
  }
  return inference::TYPE_INVALID;
}

// Triton defines a format for image tensors (4-D with the batch) only.
inference::ModelInput::Format InputFormat(Layout layout) {
  switch (layout) {
    case Layout::kNCHW:
      return inference::ModelInput::FORMAT_NCHW;
    case Layout::kNHWC:
      return inference::ModelInput::FORMAT_NHWC;
    default:
      return inference::ModelInput::FORMAT_NONE;
  }
}

// Byte-order dims with -1 for the batch and spatial dims, which any request
// may choose; without the batch dim when the graph batches (Triton's dims
// then describe one batch element).
Shape VariableDims(const Graph& graph, int64_t channels, bool batching) {
  Shape logical(2 + graph.spec().spatial_rank, -1);
  logical[1] = channels;
  Shape dims = KServeShape(graph, logical);
  if (batching) dims.erase(dims.begin());  // N leads in every layout
  return dims;
}

}  // namespace

void KServeModelConfigToProto(const Graph& graph, inference::ModelConfig* config,
                              const DynamicBatchingOptions* batching) {
  const GraphSpec& spec = graph.spec();
  const bool batches = batching != nullptr && batching->max_batch_size > 0;
  config->set_name(graph.name());
  config->set_platform("convserve");
  config->set_max_batch_size(batches ? static_cast<int32_t>(batching->max_batch_size) : 0);
  if (batches) {
    inference::ModelDynamicBatching* dynamic = config->mutable_dynamic_batching();
    for (int64_t size : batching->preferred_batch_sizes) {
      dynamic->add_preferred_batch_size(static_cast<int32_t>(size));
    }
    dynamic->set_max_queue_delay_microseconds(
        static_cast<uint64_t>(absl::ToInt64Microseconds(batching->max_queue_delay)));
  }
  inference::ModelInput* input = config->add_input();
  input->set_name(kInputName);
  input->set_data_type(ModelDataType(spec.dtype));
  input->set_format(InputFormat(spec.layout));
  for (int64_t d : VariableDims(graph, spec.input_channels, batches)) input->add_dims(d);
  inference::ModelOutput* output = config->add_output();
  output->set_name(kOutputName);
  output->set_data_type(ModelDataType(spec.dtype));
  for (int64_t d : VariableDims(graph, spec.layers.back().out_channels, batches)) output->add_dims(d);
  auto& parameters = *config->mutable_parameters();
  parameters["graph_id"].set_string_value(graph.id());
  parameters["layout"].set_string_value(LayoutName(spec.layout));
  parameters["layers"].set_string_value(absl::StrCat(spec.layers.size()));
}

}  // namespace convserve
