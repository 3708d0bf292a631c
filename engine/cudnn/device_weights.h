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
  // Copies every layer's weights and bias to `device` (synchronously). With
  // `tf32_copies` (float32 may be multiplied in TF32), a dense channels-last
  // float32 graph's layers also get their weights rounded to TF32, a second
  // copy (tf32_weights). Layers the direct narrow GEMM runs also get its
  // packed copy (narrow_weights).
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const Graph& graph, int device,
                                                               bool tf32_copies);
  ~DeviceWeights();

  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const void* weights(size_t layer) const { return weights_[layer].data(); }
  // The weights rounded to TF32 (RoundToTf32), or null: for the implicit
  // GEMM's wgmma, which would drop their low bits unrounded.
  const void* tf32_weights(size_t layer) const { return tf32_weights_[layer].data(); }
  // The narrow GEMM's packed weights (DirectNarrowPackedWeights), or null
  // where it does not run the layer.
  const void* narrow_weights(size_t layer) const { return narrow_weights_[layer].data(); }
  // Null for a layer without bias.
  const void* bias(size_t layer) const { return biases_[layer].data(); }
  int64_t bytes() const { return bytes_; }

 private:
  explicit DeviceWeights(int device) : device_(device) {}

  const int device_;
  std::vector<DeviceBuffer> weights_;
  std::vector<DeviceBuffer> tf32_weights_;    // empty buffers where there is no copy
  std::vector<DeviceBuffer> narrow_weights_;  // likewise
  std::vector<DeviceBuffer> biases_;  // empty buffer for layers without bias
  int64_t bytes_ = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEVICE_WEIGHTS_H_
