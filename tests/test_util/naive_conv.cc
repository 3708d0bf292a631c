#include "tests/test_util/naive_conv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "tests/test_util/for_each_on_threads.h"

namespace convserve {
namespace {

// Offset of logical index (n, c, s...) in a dense tensor of logical `shape`.
int64_t Offset(const Shape& shape, bool channels_last, int64_t n, int64_t c,
               const std::vector<int64_t>& spatial) {
  const size_t rank = spatial.size();
  int64_t offset = n;
  if (channels_last) {
    for (size_t d = 0; d < rank; ++d) offset = offset * shape[2 + d] + spatial[d];
    return offset * shape[1] + c;
  }
  offset = offset * shape[1] + c;
  for (size_t d = 0; d < rank; ++d) offset = offset * shape[2 + d] + spatial[d];
  return offset;
}

// Advances a multi-index over `extent`; false after the last one.
bool Next(std::vector<int64_t>* index, const std::vector<int64_t>& extent) {
  for (size_t d = index->size(); d-- > 0;) {
    if (++(*index)[d] < extent[d]) return true;
    (*index)[d] = 0;
  }
  return false;
}

// Rounds `values` to the nearest value of `dtype`, as a backend's store of a
// layer output does: double -> float, then float -> dtype and back.
void RoundToStoredDType(DType dtype, std::vector<double>* values) {
  std::vector<float> floats(values->begin(), values->end());
  std::string bytes(floats.size() * DTypeSize(dtype), '\0');
  FromFloat(dtype, floats.data(), bytes.data(), floats.size());
  ToFloat(dtype, bytes.data(), floats.data(), floats.size());
  values->assign(floats.begin(), floats.end());
}

}  // namespace

double NaiveActivation(const Activation& a, double x) {
  switch (a.kind) {
    case ActivationKind::kIdentity:
      return x;
    case ActivationKind::kRelu: {
      // A plain ReLU gives +0 for every x <= 0, -infinity included (a slope
      // of 0 times -infinity would be NaN), as engine/activation.h does.
      double y = x > 0 ? x : (a.negative_slope == 0.0f ? 0.0 : a.negative_slope * x);
      if (a.has_upper_clip) y = std::min<double>(y, a.upper_clip);
      return y;
    }
    case ActivationKind::kTanh:
      return std::tanh(x);
    case ActivationKind::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case ActivationKind::kElu:
      return x > 0 ? x : a.alpha * (std::exp(x) - 1.0);
    case ActivationKind::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActivationKind::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActivationKind::kSoftplus:
      return std::log1p(std::exp(a.beta * x)) / a.beta;
    case ActivationKind::kSwish:
      return x / (1.0 + std::exp(-a.beta * x));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<double> DecodeToDouble(DType dtype, const std::string& bytes) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  ToFloat(dtype, bytes.data(), values.data(), values.size());
  return std::vector<double>(values.begin(), values.end());
}

std::vector<double> NaiveForward(const Graph& graph, const Shape& input_shape,
                                 const std::string& input, Shape* output_shape, int threads) {
  const GraphSpec& spec = graph.spec();
  const bool channels_last = IsChannelsLast(spec.layout);
  const size_t rank = spec.spatial_rank;
  std::vector<double> current = DecodeToDouble(spec.dtype, input);
  Shape in_shape = input_shape;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const ConvLayerSpec& layer = spec.layers[i];
    const std::vector<double> weights = DecodeToDouble(spec.dtype, layer.weights);
    const std::vector<double> bias =
        layer.bias.empty() ? std::vector<double>(layer.out_channels, 0.0)
                           : DecodeToDouble(spec.dtype, layer.bias);
    const Shape weight_shape = graph.WeightShape(i);
    Shape out_shape = {in_shape[0], layer.out_channels};
    for (size_t d = 0; d < rank; ++d) {
      out_shape.push_back(ConvOutputSize(in_shape[2 + d], layer.kernel_size[d], layer.stride[d],
                                         layer.dilation[d], layer.pad_before[d],
                                         layer.pad_after[d]));
    }
    const int64_t cin_per_group = in_shape[1] / layer.groups;
    const int64_t k_per_group = layer.out_channels / layer.groups;
    std::vector<double> out(NumElements(out_shape));
    const std::vector<int64_t> out_extent(out_shape.begin() + 2, out_shape.end());
    const std::vector<int64_t> kernel_extent(layer.kernel_size.begin(), layer.kernel_size.end());
    // Each (n, k) writes its own outputs: they run on `threads` threads.
    const int64_t out_channels = out_shape[1];
    ForEachOnThreads(out_shape[0] * out_channels, threads, [&](size_t item) {
      const int64_t n = static_cast<int64_t>(item) / out_channels;
      const int64_t k = static_cast<int64_t>(item) % out_channels;
      const int64_t group = k / k_per_group;
      // Index vectors live outside the tap loop: allocating them per tap
      // made the reference several times slower than the arithmetic.
      std::vector<int64_t> o(rank, 0);
      std::vector<int64_t> t(rank);
      std::vector<int64_t> at(rank);
      do {
        double acc = 0;
        for (int64_t c = 0; c < cin_per_group; ++c) {
          std::fill(t.begin(), t.end(), 0);
          do {
            bool inside = true;
            for (size_t d = 0; d < rank; ++d) {
              at[d] = o[d] * layer.stride[d] - layer.pad_before[d] + t[d] * layer.dilation[d];
              inside = inside && at[d] >= 0 && at[d] < in_shape[2 + d];
            }
            if (!inside) continue;
            const double x =
                current[Offset(in_shape, channels_last, n, group * cin_per_group + c, at)];
            const double w = weights[Offset(weight_shape, channels_last, k, c, t)];
            acc += x * w;
          } while (Next(&t, kernel_extent));
        }
        out[Offset(out_shape, channels_last, n, k, o)] =
            NaiveActivation(layer.activation, acc + bias[k]);
      } while (Next(&o, out_extent));
    });
    RoundToStoredDType(spec.dtype, &out);
    current = std::move(out);
    in_shape = out_shape;
  }
  *output_shape = in_shape;
  return current;
}

double RelativeL2Error(const std::vector<double>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(actual[i])) return std::numeric_limits<double>::infinity();
    diff += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace convserve
