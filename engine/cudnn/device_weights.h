// A graph's weights and biases on one GPU, uploaded once and shared by every
// plan and request of the graph on that GPU. Freed (on its device) when the
// last holder lets go.
#ifndef CONVSERVE_ENGINE_CUDNN_DEVICE_WEIGHTS_H_
#define CONVSERVE_ENGINE_CUDNN_DEVICE_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/graph.h"

namespace convserve {

class DeviceWeights {
 public:
  // Copies every layer's weights and bias to `device` (synchronously).
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const Graph& graph, int device);
  ~DeviceWeights();

  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const void* weights(size_t layer) const { return weights_[layer].data(); }
  // Null for a layer without bias.
  const void* bias(size_t layer) const { return biases_[layer].data(); }
  int64_t bytes() const { return bytes_; }

 private:
  explicit DeviceWeights(int device) : device_(device) {}

  const int device_;
  std::vector<DeviceBuffer> weights_;
  std::vector<DeviceBuffer> biases_;  // empty buffer for layers without bias
  int64_t bytes_ = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEVICE_WEIGHTS_H_
