#include "tests/test_util/layer_case.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {

std::string LayerCase::Describe() const {
  return absl::StrCat(name.empty() ? "" : name + " ", DTypeName(dtype),
                      channels_last ? " NHWC" : " NCHW", " x[", batch, ",", channels, ",", height,
                      ",", width, "] k", kernel_h, "x", kernel_w, " s", stride_h, ",", stride_w,
                      " d", dilation_h, ",", dilation_w, " pad ", pad_top, ",", pad_bottom, ",",
                      pad_left, ",", pad_right, " -> ", out_channels,
                      groups > 1 ? absl::StrCat(" groups ", groups) : "",
                      bias ? " bias " : " no bias ", ActivationName(activation.kind));
}

bool LayerCase::HasOutput() const {
  return ConvOutputSize(height, kernel_h, stride_h, dilation_h, pad_top, pad_bottom) >= 1 &&
         ConvOutputSize(width, kernel_w, stride_w, dilation_w, pad_left, pad_right) >= 1;
}

absl::StatusOr<std::shared_ptr<const Graph>> MakeLayerGraph(const LayerCase& c,
                                                            std::mt19937_64* rng) {
  GraphSpec spec;
  spec.name = c.name.empty() ? "layer" : c.name;
  spec.dtype = c.dtype;
  spec.layout = c.channels_last ? Layout::kNHWC : Layout::kNCHW;
  spec.input_channels = c.channels;
  ConvLayerSpec layer;
  layer.out_channels = c.out_channels;
  layer.groups = c.groups;
  layer.kernel_size = {c.kernel_h, c.kernel_w};
  layer.stride = {c.stride_h, c.stride_w};
  layer.dilation = {c.dilation_h, c.dilation_w};
  layer.pad_before = {c.pad_top, c.pad_left};
  layer.pad_after = {c.pad_bottom, c.pad_right};
  const int64_t fan_in = c.channels / c.groups * c.kernel_h * c.kernel_w;
  layer.weights = RandomTensor(c.dtype, c.out_channels * fan_in, std::sqrt(3.0f / fan_in), rng);
  if (c.bias) layer.bias = RandomTensor(c.dtype, c.out_channels, 0.5f, rng);
  layer.activation = c.activation;
  spec.layers.push_back(std::move(layer));
  return Graph::Create(std::move(spec));
}

Activation DrawActivation(std::mt19937_64* rng) {
  Activation a;
  a.kind = static_cast<ActivationKind>((*rng)() % (static_cast<int>(ActivationKind::kSwish) + 1));
  if (a.kind == ActivationKind::kRelu) {
    a.has_upper_clip = (*rng)() % 2 == 0;
    a.upper_clip = 6.0f;
    a.negative_slope = (*rng)() % 3 == 0 ? 0.1f : 0.0f;
  }
  if (a.kind == ActivationKind::kElu) a.alpha = 0.7f;
  if (a.kind == ActivationKind::kSoftplus || a.kind == ActivationKind::kSwish) a.beta = 1.5f;
  return a;
}

}  // namespace convserve
