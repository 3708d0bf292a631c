#include "engine/cudnn/pointwise_pair.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace convserve {

bool PointwiseKernelBuiltFor(int64_t channels) {
  for (int64_t built : kPointwisePairOuterChannels) {
    if (channels == built) return true;
  }
  return false;
}

std::string PointwiseLayerRejection(const ConvLayerProblem& problem, const char* kernel,
                                    bool float32) {
  if (problem.dtype == DType::kFloat32 && !float32) {
    return absl::StrCat(kernel, " runs float16 and bfloat16 only");
  }
  if (!problem.channels_last) return absl::StrCat(kernel, " runs channels-last (NHWC) tensors only");
  if (problem.input.size() != 4 || problem.weights.size() != 4 || problem.output.size() != 4) {
    return absl::StrCat(kernel, " runs 2-D convolutions only");
  }
  if (problem.weights[2] != 1 || problem.weights[3] != 1) return "not a 1x1 convolution";
  for (size_t d = 0; d < problem.stride.size(); ++d) {
    if (problem.stride[d] != 1 || problem.dilation[d] != 1 || problem.pad_before[d] != 0 ||
        problem.pad_after[d] != 0) {
      return "a 1x1 convolution with a stride, dilation or padding";
    }
  }
  if (problem.groups() != 1) return "a grouped convolution";
  return "";
}

int64_t PointwiseTileBlocks(int64_t pixels, int64_t slices, int64_t max_blocks) {
  const int64_t tiles = PointwiseTiles(pixels);
  return slices * std::max<int64_t>(1, std::min(tiles, max_blocks / slices));
}

int64_t PointwisePairSharedBytes(const ConvLayerProblem& first, const ConvLayerProblem& second) {
  const int64_t c0 = first.input[1], c1 = first.output[1], c2 = second.output[1];
  const int64_t row0 = c0 + kPointwisePairPad, row1 = c1 + kPointwisePairPad;
  const int64_t element = 2;  // float16 or bfloat16
  return (c1 * row0 + c2 * row1 + 2 * kPointwisePairTile * row0) * element +
         (c1 + c2) * static_cast<int64_t>(sizeof(float));
}

std::string PointwisePairRejection(const ConvLayerProblem& first, const ConvLayerProblem& second,
                                   int64_t shared_bytes) {
  for (const ConvLayerProblem* problem : {&first, &second}) {
    std::string why = PointwiseLayerRejection(*problem, "the pair kernel");
    if (!why.empty()) return absl::StrCat(problem == &first ? "first" : "second", " layer: ", why);
  }
  if (first.dtype != second.dtype || second.input != first.output) {
    return "the second layer does not read the first's output";
  }
  const int64_t c0 = first.input[1], c1 = first.output[1], c2 = second.output[1];
  if (!PointwiseKernelBuiltFor(c0) || !PointwiseKernelBuiltFor(c2)) {
    return absl::StrCat("the outer channel counts are ", c0, " and ", c2,
                        "; the pair kernel is built for 32 and 64");
  }
  if (c1 % kPointwisePairChunk != 0) {
    return absl::StrCat("the inner channel count ", c1, " is not a multiple of ",
                        kPointwisePairChunk);
  }
  const int64_t needed = PointwisePairSharedBytes(first, second);
  if (needed > shared_bytes) {
    return absl::StrCat("the weights need ", needed, " bytes of shared memory per block; the GPU "
                        "allows ", shared_bytes);
  }
  return "";
}

}  // namespace convserve
