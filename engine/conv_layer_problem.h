// One conv -> bias -> activation layer as a backend plans it: shapes and math,
// no pointers and no library types. It has a one-line text form so it can
// cross a pipe to the engine prober and key the on-disk plan store.
#ifndef CONVSERVE_ENGINE_CONV_LAYER_PROBLEM_H_
#define CONVSERVE_ENGINE_CONV_LAYER_PROBLEM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/activation.h"
#include "engine/graph.h"
#include "engine/tensor.h"

namespace convserve {

struct ConvLayerProblem {
  DType dtype = DType::kFloat32;
  bool channels_last = false;
  // Logical N, C, spatial...; K, C/groups, spatial...; N, K, spatial....
  Shape input;
  Shape weights;
  Shape output;
  std::vector<int64_t> stride, dilation, pad_before, pad_after;
  bool has_bias = false;
  Activation activation;

  // True when a conv alone cannot produce Y (there is a bias or an activation).
  bool needs_epilogue() const {
    return has_bias || activation.kind != ActivationKind::kIdentity;
  }
  int64_t groups() const { return weights[1] > 0 ? input[1] / weights[1] : 1; }
  // Multiply-accumulates of the convolution.
  int64_t MacCount() const;
  // For logs and errors: "float16 channels-last x[1, 64, 56, 56] w[...] ...".
  std::string Describe() const;
  // The exact, canonical one-line text form (no spaces): equal problems give
  // equal strings, and Parse(Encode()) returns an equal problem.
  std::string Encode() const;
  // INVALID_ARGUMENT naming the field that is malformed or inconsistent.
  static absl::StatusOr<ConvLayerProblem> Parse(absl::string_view text);

  bool operator==(const ConvLayerProblem& other) const { return Encode() == other.Encode(); }
};

// Layer `i` of `graph` as a problem of `input` and `output` shapes.
ConvLayerProblem MakeLayerProblem(const Graph& graph, size_t i, Shape input, Shape output);
// The problems of every layer of `graph` for a checked input shape, with
// `outputs` from Graph::InferShapes.
std::vector<ConvLayerProblem> MakeLayerProblems(const Graph& graph, const Shape& input_shape,
                                                const std::vector<Shape>& outputs);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CONV_LAYER_PROBLEM_H_
