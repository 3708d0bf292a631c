#include "engine/cudnn/device_weights.h"

#include "engine/cudnn/cudnn_status.h"
#include "engine/status_macros.h"

namespace convserve {

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Graph& graph,
                                                                     int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<DeviceWeights> uploaded(new DeviceWeights(device));
  for (const ConvLayerSpec& layer : graph.spec().layers) {
    ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::Create(layer.weights.size()));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(w.data(), layer.weights.data(), layer.weights.size(),
                                    cudaMemcpyHostToDevice));
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(layer.bias.size()));
    if (!layer.bias.empty()) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpy(b.data(), layer.bias.data(), layer.bias.size(), cudaMemcpyHostToDevice));
    }
    uploaded->bytes_ += static_cast<int64_t>(layer.weights.size() + layer.bias.size());
    uploaded->weights_.push_back(std::move(w));
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
  biases_.clear();
  cudaSetDevice(current);
}

}  // namespace convserve
