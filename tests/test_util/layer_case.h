// One 2-D conv -> bias -> activation layer for the GPU layer tests (the
// direct path's kernels): its sizes, a graph of it with fresh random weights,
// and random activations, so each test draws only the layers it is about.
#ifndef CONVSERVE_TESTS_TEST_UTIL_LAYER_CASE_H_
#define CONVSERVE_TESTS_TEST_UTIL_LAYER_CASE_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "engine/activation.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

struct LayerCase {
  std::string name;  // "" for a drawn case
  DType dtype = DType::kFloat32;
  bool channels_last = false;
  int64_t batch = 1, channels = 1, out_channels = 1, groups = 1, height = 1, width = 1;
  int64_t kernel_h = 3, kernel_w = 3;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  bool bias = true;
  Activation activation;

  std::string Describe() const;
  Shape InputShape() const { return {batch, channels, height, width}; }
  // Whether the layer has at least one output element.
  bool HasOutput() const;
};

// A one-layer graph of `c`: weights uniform in +-sqrt(3 / fan-in), bias in
// +-0.5, drawn from `rng` in that order.
absl::StatusOr<std::shared_ptr<const Graph>> MakeLayerGraph(const LayerCase& c,
                                                            std::mt19937_64* rng);

// A uniform draw from [low, high] (std::mt19937_64 output only: the same
// cases on every standard library).
inline int64_t DrawInRange(std::mt19937_64* rng, int64_t low, int64_t high) {
  return low + static_cast<int64_t>((*rng)() % static_cast<uint64_t>(high - low + 1));
}

// Any activation kind; ReLU clipped at 6 half the time and leaky (0.1) a
// third; ELU alpha 0.7; softplus and swish beta 1.5.
Activation DrawActivation(std::mt19937_64* rng);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_LAYER_CASE_H_
