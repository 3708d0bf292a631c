#include "engine/cudnn/device_weights.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/status_macros.h"
#include "engine/tensor.h"

namespace convserve {

namespace {

absl::StatusOr<DeviceBuffer> Copy(const void* data, size_t bytes) {
  ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Create(bytes));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice));
  return buffer;
}

// Layer `i` on a nominal input, one image the kernel's size, without
// padding, and a one-pixel output (not checked against each other): what
// the narrow GEMM's packing depends on (dtype, layout, channels, kernel,
// stride and dilation) does not depend on the input's size.
ConvLayerProblem KernelProblem(const Graph& graph, size_t i) {
  const Shape weights = graph.WeightShape(i);
  const ConvLayerSpec& layer = graph.spec().layers[i];
  Shape input = {1, weights[1] * std::max<int64_t>(layer.groups, 1)};
  Shape output = {1, weights[0]};
  for (size_t d = 2; d < weights.size(); ++d) {
    input.push_back(weights[d]);
    output.push_back(1);
  }
  ConvLayerProblem problem = MakeLayerProblem(graph, i, std::move(input), std::move(output));
  problem.pad_before = problem.pad_after = std::vector<int64_t>(weights.size() - 2, 0);
  return problem;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Graph& graph,
                                                                     int device,
                                                                     bool tf32_copies) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<DeviceWeights> uploaded(new DeviceWeights(device));
  const GraphSpec& spec = graph.spec();
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const ConvLayerSpec& layer = spec.layers[i];
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
    DeviceBuffer narrow;
    if (const ConvLayerProblem problem = KernelProblem(graph, i);
        DirectNarrowPackedBytes(problem) > 0) {
      const std::string packed = DirectNarrowPackedWeights(problem, layer.weights);
      if (packed.empty()) {
        return absl::InternalError(absl::StrCat("layer ", i, "'s ", layer.weights.size(),
                                                " bytes of weights are not its kernel's"));
      }
      ASSIGN_OR_RETURN(narrow, Copy(packed.data(), packed.size()));
      uploaded->bytes_ += static_cast<int64_t>(packed.size());
    }
    ASSIGN_OR_RETURN(DeviceBuffer b, layer.bias.empty()
                                         ? DeviceBuffer::Create(0)
                                         : Copy(layer.bias.data(), layer.bias.size()));
    uploaded->bytes_ += static_cast<int64_t>(layer.weights.size() + layer.bias.size());
    uploaded->weights_.push_back(std::move(w));
    uploaded->tf32_weights_.push_back(std::move(tf32));
    uploaded->narrow_weights_.push_back(std::move(narrow));
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
  narrow_weights_.clear();
  biases_.clear();
  cudaSetDevice(current);
}

}  // namespace convserve
