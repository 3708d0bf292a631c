// The one place that translates wire messages (convserve.v1, KServe v2) to
// engine types and back. Errors name the proto field a user must change.
#ifndef CONVSERVE_SERVER_PROTO_CONVERT_H_
#define CONVSERVE_SERVER_PROTO_CONVERT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"
#include "engine/graph.h"
#include "engine/runtime/dynamic_batcher.h"
#include "engine/runtime/infer_call.h"
#include "engine/tensor.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

// Moves weights out of `graph` (no copy). Checks enum values; the rest is
// checked by Graph::Create.
absl::StatusOr<GraphSpec> GraphSpecFromProto(v1::GraphDef* graph);
// Metadata of a loaded graph, weights left out; `batching` its dynamic
// batching settings (null when it does not batch).
void GraphInfoToProto(const Graph& graph, v1::GraphInfo* info,
                      const DynamicBatchingOptions* batching = nullptr);

// `defaults` (the server's flags) with the fields `proto` sets; checked by
// ValidateDynamicBatching when the graph loads.
DynamicBatchingOptions DynamicBatchingFromProto(const v1::DynamicBatching& proto,
                                                const DynamicBatchingOptions& defaults);
void DynamicBatchingToProto(const DynamicBatchingOptions& batching, v1::DynamicBatching* proto);

v1::DataType DataTypeToProto(DType dtype);
// INVALID_ARGUMENT naming `field` for unspecified or unknown values.
absl::StatusOr<DType> DTypeFromProto(v1::DataType type, const std::string& field);
v1::Layout LayoutToProto(Layout layout);

// Where a KServe tensor lives when it is in a shared-memory region (Triton's
// parameters shared_memory_region, shared_memory_byte_size and, optional,
// shared_memory_offset).
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};
// Nullopt when `parameters` name no region; INVALID_ARGUMENT naming the
// parameter under `field` when they are incomplete or malformed.
absl::StatusOr<std::optional<SharedMemoryRef>> KServeSharedMemoryRef(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    const std::string& field);

// The tensor of a convserve.v1 Infer request, checked against the graph.
struct WireTensor {
  // Logical N, C, spatial....
  Shape shape;
  // Points into the request message; empty when the tensor is in shared
  // memory.
  absl::Span<const uint8_t> bytes;
  // KServe: the tensor's shared-memory region, when it is in one.
  std::optional<SharedMemoryRef> shared_memory;
};
// `data`, when given, holds input.data read off the wire into a buffer
// (server/tensor_wire.h); then the request's own field is empty.
absl::StatusOr<WireTensor> InferInputFromProto(const Graph& graph, const v1::InferRequest& request,
                                               const std::vector<TensorMemory>* data = nullptr);

// KServe v2: "FP32", "FP16", "BF16".
std::string KServeDataType(DType dtype);
// KServe tensors carry the physical shape, the dims in byte order (N, H, W, C
// for NHWC); -1 marks a variable dim.
void KServeMetadataToProto(const Graph& graph, inference::ModelMetadataResponse* response);
// `raw_inputs`, when given, are the request's raw_input_contents, read off
// the wire into buffers (server/tensor_wire.h); then the request's own field
// is empty.
absl::StatusOr<WireTensor> KServeInputFromProto(
    const Graph& graph, const inference::ModelInferRequest& request,
    const std::vector<TensorMemory>* raw_inputs = nullptr);
// Checks the requested outputs: none, or the one named "output"; returns its
// shared-memory region when it names one.
absl::StatusOr<std::optional<SharedMemoryRef>> CheckKServeOutputs(
    const inference::ModelInferRequest& request);
// Physical shape for a KServe response.
Shape KServeShape(const Graph& graph, const Shape& logical);

// Tensor names of every graph in the KServe protocol.
inline constexpr char kInputName[] = "input";
inline constexpr char kOutputName[] = "output";

}  // namespace convserve

#endif  // CONVSERVE_SERVER_PROTO_CONVERT_H_
