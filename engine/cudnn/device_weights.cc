#include "engine/cudnn/device_weights.h"

#include <cstring>
#include <vector>

#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"
#include "engine/tensor.h"

namespace convserve {

namespace {

absl::StatusOr<DeviceBuffer> Copy(const void* data, size_t bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(bytes));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice));
  return buffer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Graph& graph,
                                                                     int device,
                                                                     bool tf32_copies) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<DeviceWeights> uploaded(new DeviceWeights(device));
  const GraphSpec& spec = graph.spec();
  for (const ConvLayerSpec& layer : spec.layers) {
    ASSIGN_OR_RETURN(DeviceBuffer w, Copy(layer.weights.data(), layer.weights.size()));
    DeviceBuffer tf32;
    if (tf32_copies && spec.dtype == DType::kFloat32 && IsChannelsLast(spec.layout) &&
        layer.groups <= 1) {
      std::vector<float> rounded(layer.weights.size() / sizeof(float));
      std::memcpy(rounded.data(), layer.weights.data(), rounded.size() * sizeof(float));
      for (float& value : rounded) value = RoundToTf32(value);
      ASSIGN_OR_RETURN(tf32, Copy(rounded.data(), rounded.size() * sizeof(float)));
      uploaded->bytes_ += static_cast<int64_t>(layer.weights.size());
    }
    ASSIGN_OR_RETURN(DeviceBuffer b, layer.bias.empty()
                                         ? DeviceBuffer::Create(0)
                                         : Copy(layer.bias.data(), layer.bias.size()));
    uploaded->bytes_ += static_cast<int64_t>(layer.weights.size() + layer.bias.size());
    uploaded->weights_.push_back(std::move(w));
    uploaded->tf32_weights_.push_back(std::move(tf32));
    uploaded->biases_.push_back(std::move(b));
  }
  // cudaMemcpy from pageable memory may return before the bytes are in
  // device memory, and the kernels that read them run on non-blocking
  // streams, which do not wait for the default stream the copies ran on.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return uploaded;
}

DeviceWeights::~DeviceWeights() {
  // cudaFree acts on the current device's context; make it this one.
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  weights_.clear();
  tf32_weights_.clear();
  biases_.clear();
  cudaSetDevice(current);
}

}  // namespace convserve
