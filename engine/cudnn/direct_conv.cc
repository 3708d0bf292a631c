#include "engine/cudnn/direct_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/pointwise_pair.h"

namespace convserve {
namespace {

constexpr int64_t kColumnChoices[] = {2, 1, 4};
constexpr int64_t kVectorByteChoices[] = {16, 8};
constexpr int64_t kTileChannelChoices[] = {64, 32};
constexpr int64_t kSplitChoices[] = {1, 2, 4, 8};
constexpr int64_t kTilePixelChoices[] = {128, 64};
constexpr int64_t kBlocksPerSmChoices[] = {2, 1};
// The pointwise GEMM's output channels a block (knob 2), besides all of K.
constexpr int64_t kSliceChoices[] = {128, 64};
constexpr int64_t kTileRowChoices[] = {4, 8};
// The GEMM engines' configurations are listed best guess first: the one
// whose block count comes nearest this (an H100's 132 SMs).
constexpr double kBlocksGuess = 132;

// `configs`, each with the blocks it launches, best guess first: the one
// whose block count comes nearest kBlocksGuess (stable for ties).
std::vector<EngineConfigId> NearestBlocksFirst(
    std::vector<std::pair<double, EngineConfigId>> configs) {
  const auto distance = [](double blocks) {
    return std::abs(std::log(blocks / kBlocksGuess));
  };
  std::stable_sort(configs.begin(), configs.end(), [&](const auto& a, const auto& b) {
    return distance(a.first) < distance(b.first);
  });
  std::vector<EngineConfigId> ids;
  for (auto& [blocks, id] : configs) ids.push_back(std::move(id));
  return ids;
}

bool IsTwoD(const ConvLayerProblem& problem) {
  return problem.input.size() == 4 && problem.weights.size() == 4 &&
         problem.output.size() == 4;
}

bool IsDepthwise(const ConvLayerProblem& problem) {
  return IsTwoD(problem) && problem.weights[1] == 1 && problem.output[1] == problem.input[1];
}

bool IsDense(const ConvLayerProblem& problem) {
  return IsTwoD(problem) && problem.weights[1] == problem.input[1];
}

// The kernels index elements with 32-bit integers.
std::string SizeRejection(const ConvLayerProblem& problem) {
  if (NumElements(problem.input) > kDirectMaxElements ||
      NumElements(problem.weights) > kDirectMaxElements ||
      NumElements(problem.output) > kDirectMaxElements) {
    return absl::StrCat("a tensor has over ", kDirectMaxElements,
                        " elements, more than the direct engines index");
  }
  return "";
}

std::string DepthwiseRejection(const ConvLayerProblem& problem) {
  const int64_t taps = problem.weights[2] * problem.weights[3];
  if (taps > kDirectMaxTaps) {
    return absl::StrCat("the depthwise kernel has ", taps, " taps, over the direct engine's ",
                        kDirectMaxTaps);
  }
  return SizeRejection(problem);
}

std::string GemmRejection(const ConvLayerProblem& problem) {
  if (!problem.channels_last) {
    return "the direct path's implicit GEMM runs channels-last layers only";
  }
  const int64_t chunk = DirectGemmChunk(problem.dtype);
  if (problem.input[1] % chunk != 0) {
    return absl::StrCat("the direct path's implicit GEMM needs ", DTypeName(problem.dtype),
                        " input channels a multiple of ", chunk, " (have ", problem.input[1],
                        ")");
  }
  if (problem.output[1] % 8 != 0) {
    return absl::StrCat(
        "the direct path's implicit GEMM needs output channels a multiple of 8 (have ",
        problem.output[1], ")");
  }
  return SizeRejection(problem);
}

// Steps of the reduction one output channel takes.
int64_t GemmChunks(const ConvLayerProblem& problem) {
  return problem.weights[2] * problem.weights[3] * problem.input[1] /
         DirectGemmChunk(problem.dtype);
}

}  // namespace

std::string DirectPointwiseRejection(const ConvLayerProblem& problem) {
  if (std::string why = PointwiseLayerRejection(problem, "the pointwise GEMM", /*float32=*/true);
      !why.empty()) {
    return why;
  }
  const int64_t c = problem.input[1], k = problem.output[1];
  if (!PointwiseKernelBuiltFor(c)) {
    return absl::StrCat("the pointwise GEMM is built for 32 or 64 input channels (have ", c, ")");
  }
  if (k % kPointwisePairChunk != 0 || k > kDirectPointwiseMaxChannels) {
    return absl::StrCat("the pointwise GEMM needs output channels a multiple of ",
                        kPointwisePairChunk, " up to ", kDirectPointwiseMaxChannels, " (have ", k,
                        ")");
  }
  return SizeRejection(problem);
}

std::string DirectHaloRejection(const ConvLayerProblem& problem) {
  if (!problem.channels_last) return "the halo GEMM runs channels-last (NHWC) tensors only";
  if (!IsDense(problem) || problem.groups() != 1) {
    return "the halo GEMM runs dense 2-D convolutions only";
  }
  if (problem.weights[2] != 3 || problem.weights[3] != 3) {
    return "the halo GEMM runs 3x3 kernels only";
  }
  for (size_t d = 0; d < problem.stride.size(); ++d) {
    if (problem.stride[d] != 1 || problem.dilation[d] != 1) {
      return "the halo GEMM needs stride and dilation 1";
    }
  }
  const int64_t c = problem.input[1], k = problem.output[1];
  if (c != 32 && c != 64 && c != 128 && c != 256) {
    return absl::StrCat("the halo GEMM is built for 32, 64, 128 or 256 input channels (have ", c,
                        ")");
  }
  if (k % 32 != 0) {
    return absl::StrCat("the halo GEMM needs output channels a multiple of 32 (have ", k, ")");
  }
  // A thread's copy offsets within the input rows a tile reads (at most
  // 8 + 2) are 32-bit.
  if (10 * problem.input[3] * c > kDirectMaxElements) {
    return absl::StrCat("the halo GEMM indexes 10 input rows with 32-bit offsets; a row has ",
                        problem.input[3] * c, " elements");
  }
  return SizeRejection(problem);
}

namespace {

// The halo GEMM's configurations with the blocks each launches (all that
// fit at once, one a tile at most; two an SM where the shared memory lets
// them on an H100). Over kDirectHaloMaxUnsplitBytes of channels (256
// 16-bit ones, 128 or 256 float) the taps are split across kDirectHaloSplit
// blocks (their weights fit no other way), listed where the blocks of one
// a tile leave SMs idle; on fewer the split lost (3x3 64 @ 56 and 128 @ 28
// at batch 1 in float16, docs/cudnn.md) and is not listed. Split tiles
// whose two halo buffers do not fit are listed with one (DirectHaloBuffers).
std::vector<std::pair<double, EngineConfigId>> HaloConfigs(const ConvLayerProblem& problem) {
  const int64_t k = problem.output[1];
  std::vector<std::pair<double, EngineConfigId>> configs;
  const int64_t split =
      problem.input[1] * static_cast<int64_t>(DTypeSize(problem.dtype)) > kDirectHaloMaxUnsplitBytes
          ? kDirectHaloSplit
          : 1;
  for (int64_t rows : kTileRowChoices) {
    const int64_t tiles = problem.output[0] * ((problem.output[2] + rows - 1) / rows) *
                          ((problem.output[3] + kDirectHaloTileColumns - 1) /
                           kDirectHaloTileColumns);
    for (int64_t channels : kTileChannelChoices) {
      const int64_t buffers = DirectHaloBuffers(problem.input[1], rows, channels, split,
                                                static_cast<int64_t>(DTypeSize(problem.dtype)));
      if (k % channels != 0 || buffers == 0 ||
          (split > 1 && tiles * (k / channels) >= kBlocksGuess)) {
        continue;
      }
      const int64_t bytes = DirectHaloSharedBytes(problem, rows, channels, split, buffers);
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectHaloEngine;
      id.knobs = {{kDirectKnobTileChannels, channels}, {kDirectKnobTileRows, rows}};
      if (split > 1) id.knobs.push_back({kDirectKnobTapSplit, split});
      if (buffers == 1) id.knobs.push_back({kDirectKnobHaloBuffers, 1});
      const int64_t per_sm = std::min<int64_t>(2, kDirectSharedBytesPerSm / (bytes + 1024));
      configs.emplace_back(static_cast<double>(std::min<int64_t>(
                               tiles * (k / channels) * split, per_sm * kBlocksGuess)),
                           std::move(id));
    }
  }
  return configs;
}

// Whether `blocks_per_sm` blocks of the pointwise GEMM computing `channels`
// of `problem`'s output channels fit in an SM's shared memory.
bool PointwiseFits(const ConvLayerProblem& problem, int64_t channels, int64_t blocks_per_sm) {
  const int64_t bytes = DirectPointwiseSharedBytes(problem.input[1], channels,
                                                   static_cast<int64_t>(DTypeSize(problem.dtype)));
  return bytes <= kDirectMaxSharedBytes &&
         blocks_per_sm * (bytes + 1024) <= kDirectSharedBytesPerSm;
}

// The pointwise GEMM's configurations with the blocks each launches (one a
// tile and slice at most): a block computes all K output channels (no
// knob 2) or, when a block a tile leaves SMs idle or all K's weights do not
// fit, a slice of them; each with the blocks an SM whose shared memory fits.
std::vector<std::pair<double, EngineConfigId>> PointwiseConfigs(const ConvLayerProblem& problem) {
  const int64_t pixels = problem.output[0] * problem.output[2] * problem.output[3];
  const int64_t tiles = PointwiseTiles(pixels);
  const int64_t k = problem.output[1];
  const bool sliced = tiles < kBlocksGuess || !PointwiseFits(problem, k, 1);
  std::vector<int64_t> slices = {k};
  for (int64_t slice : kSliceChoices) {
    if (sliced && slice < k && k % slice == 0) slices.push_back(slice);
  }
  std::vector<std::pair<double, EngineConfigId>> configs;
  for (int64_t slice : slices) {
    for (int64_t blocks_per_sm : kBlocksPerSmChoices) {
      if (!PointwiseFits(problem, slice, blocks_per_sm)) continue;
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectPointwiseEngine;
      if (slice < k) id.knobs.push_back({kDirectKnobTileChannels, slice});
      id.knobs.push_back({kDirectKnobBlocksPerSm, blocks_per_sm});
      const auto most = static_cast<int64_t>(blocks_per_sm * kBlocksGuess);
      configs.emplace_back(static_cast<double>(PointwiseTileBlocks(pixels, k / slice, most)),
                           std::move(id));
    }
  }
  return configs;
}

// The implicit GEMM's configurations, and the pointwise or halo GEMM's
// where it runs `problem`, nearest kBlocksGuess blocks first.
std::vector<EngineConfigId> GemmConfigs(const ConvLayerProblem& problem) {
  const int64_t pixels = problem.output[0] * problem.output[2] * problem.output[3];
  const int64_t pixel_tiles = (pixels + kDirectGemmTilePixels - 1) / kDirectGemmTilePixels;
  std::vector<std::pair<double, EngineConfigId>> configs;
  for (int64_t channels : kTileChannelChoices) {
    const int64_t channel_tiles = (problem.output[1] + channels - 1) / channels;
    for (int64_t splits : kSplitChoices) {
      // Every block of a cluster takes at least one step of the reduction.
      if (splits > GemmChunks(problem)) break;
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectGemmEngine;
      id.knobs = {{kDirectKnobTileChannels, channels}, {kDirectKnobSplits, splits}};
      configs.emplace_back(static_cast<double>(pixel_tiles * channel_tiles * splits),
                           std::move(id));
    }
  }
  if (DirectPointwiseRejection(problem).empty()) {
    for (auto& config : PointwiseConfigs(problem)) configs.push_back(std::move(config));
  }
  if (DirectHaloRejection(problem).empty()) {
    for (auto& config : HaloConfigs(problem)) configs.push_back(std::move(config));
  }
  return NearestBlocksFirst(std::move(configs));
}

std::string NarrowRejection(const ConvLayerProblem& problem) {
  if (!problem.channels_last) return "the narrow GEMM runs channels-last layers only";
  if (problem.dilation[1] != 1) return "the narrow GEMM needs dilation 1 along W";
  const int64_t row = problem.weights[3] * problem.input[1];
  if (row > kDirectNarrowMaxRow) {
    return absl::StrCat("the narrow GEMM needs kernel rows (S*C) of at most ", kDirectNarrowMaxRow,
                        " elements (have ", row, ")");
  }
  if (problem.output[1] % 8 != 0) {
    return absl::StrCat("the narrow GEMM needs output channels a multiple of 8 (have ",
                        problem.output[1], ")");
  }
  const int64_t smallest = kTilePixelChoices[std::size(kTilePixelChoices) - 1];
  if (const int64_t bytes = DirectNarrowLayoutOf(problem, smallest).shared_bytes;
      bytes > kDirectMaxSharedBytes) {
    return absl::StrCat("the narrow GEMM needs ", bytes, " bytes of shared memory, over ",
                        kDirectMaxSharedBytes);
  }
  return SizeRejection(problem);
}

// The tile sizes whose rows fit in shared memory, best guess first; the
// 128-pixel tile also with warps of 16 pixels (after 32, as many blocks).
std::vector<EngineConfigId> NarrowConfigs(const ConvLayerProblem& problem) {
  const int64_t rows = problem.output[0] * problem.output[2];
  const int64_t channel_tiles =
      (problem.output[1] + kDirectNarrowTileChannels - 1) / kDirectNarrowTileChannels;
  std::vector<std::pair<double, EngineConfigId>> configs;
  for (int64_t pixels : kTilePixelChoices) {
    if (DirectNarrowLayoutOf(problem, pixels).shared_bytes > kDirectMaxSharedBytes) {
      continue;
    }
    EngineConfigId id;
    id.path = LayerPath::kDirect;
    id.engine = kDirectNarrowEngine;
    id.knobs = {{kDirectKnobTilePixels, pixels}};
    const int64_t tiles = rows * ((problem.output[3] + pixels - 1) / pixels) * channel_tiles;
    configs.emplace_back(static_cast<double>(tiles), id);
    if (pixels == 128) {
      id.knobs.emplace_back(kDirectKnobWarpPixels, 16);
      configs.emplace_back(static_cast<double>(tiles), std::move(id));
    }
  }
  return NearestBlocksFirst(std::move(configs));
}

std::vector<EngineConfigId> DepthwiseConfigs(const ConvLayerProblem& problem) {
  std::vector<EngineConfigId> configs;
  for (int64_t vector_bytes : kVectorByteChoices) {
    for (int64_t columns : kColumnChoices) {
      EngineConfigId id;
      id.path = LayerPath::kDirect;
      id.engine = kDirectDepthwiseEngine;
      id.knobs = {{kDirectKnobColumns, columns}};
      if (problem.channels_last) id.knobs.emplace_back(kDirectKnobVectorBytes, vector_bytes);
      configs.push_back(std::move(id));
    }
    if (!problem.channels_last) break;
  }
  return configs;
}

}  // namespace

int64_t DirectGemmChunk(DType dtype) {
  return kDirectGemmChunkBytes / static_cast<int64_t>(DTypeSize(dtype));
}

DirectNarrowLayout DirectNarrowLayoutOf(const ConvLayerProblem& problem, int64_t tile_pixels) {
  const int64_t size = static_cast<int64_t>(DTypeSize(problem.dtype));
  const int64_t group = 16 / size;
  DirectNarrowLayout l;
  l.row = problem.weights[3] * problem.input[1];
  l.groups = (l.row + group - 1) / group;
  l.steps = (problem.weights[2] * l.groups + 1) / 2;
  l.pixel_step = problem.stride[1] * problem.input[1];
  // An odd number of groups per channel, so the 8 channels one ldmatrix
  // reads fall in 8 distinct 16-byte bank groups.
  l.weight_stride = (2 * l.steps + 1) * group;
  // The last pixel's row reads up to its last group's end.
  l.input_stride =
      ((tile_pixels - 1) * l.pixel_step + l.groups * group + group - 1) / group * group;
  l.span = (problem.weights[2] - 1) * problem.dilation[0] + 1;
  // The ring holds each row twice; a step's table entry is 16 bytes.
  l.shared_bytes =
      (kDirectNarrowTileChannels * l.weight_stride + 2 * l.span * l.input_stride) * size +
      16 * l.steps;
  return l;
}

int64_t DirectNarrowPackedBytes(const ConvLayerProblem& problem) {
  if (!IsDense(problem) || GemmRejection(problem).empty() || !NarrowRejection(problem).empty()) {
    return 0;
  }
  const int64_t channels = (problem.output[1] + kDirectNarrowTileChannels - 1) /
                           kDirectNarrowTileChannels * kDirectNarrowTileChannels;
  return channels * DirectNarrowLayoutOf(problem, kTilePixelChoices[0]).weight_stride *
         static_cast<int64_t>(DTypeSize(problem.dtype));
}

std::string DirectNarrowPackedWeights(const ConvLayerProblem& problem, const std::string& krsc) {
  std::string packed(static_cast<size_t>(DirectNarrowPackedBytes(problem)), '\0');
  const DirectNarrowLayout l = DirectNarrowLayoutOf(problem, kTilePixelChoices[0]);
  const auto size = static_cast<int64_t>(DTypeSize(problem.dtype));
  const int64_t rows = problem.weights[2], row_pitch = l.groups * (16 / size);
  if (packed.empty() ||
      static_cast<int64_t>(krsc.size()) != problem.output[1] * rows * l.row * size) {
    return "";
  }
  for (int64_t c = 0; c < problem.output[1]; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      const char* from = krsc.data() + (c * rows + r) * l.row * size;
      char* to = packed.data() + (c * l.weight_stride + r * row_pitch) * size;
      if (problem.dtype != DType::kFloat32) {
        std::memcpy(to, from, static_cast<size_t>(l.row * size));
        continue;
      }
      for (int64_t e = 0; e < l.row; ++e) {
        float value;
        std::memcpy(&value, from + e * size, sizeof(value));
        value = RoundToTf32(value);
        std::memcpy(to + e * size, &value, sizeof(value));
      }
    }
  }
  return packed;
}

int64_t DirectKnob(const EngineConfigId& id, int64_t type) {
  for (const auto& [knob, value] : id.knobs) {
    if (knob == type) return value;
  }
  return 0;
}

bool DirectPathApplies(const ConvLayerProblem& problem) {
  return IsDepthwise(problem) || IsDense(problem);
}

std::string DirectConvRejection(const ConvLayerProblem& problem) {
  if (IsDepthwise(problem)) return DepthwiseRejection(problem);
  if (IsDense(problem)) {
    // The narrow GEMM takes the layers the GEMM cannot.
    std::string gemm = GemmRejection(problem);
    if (gemm.empty()) return "";
    const std::string narrow = NarrowRejection(problem);
    if (narrow.empty()) return "";
    return absl::StrCat(gemm, "; ", narrow);
  }
  return "the direct path runs 2-D depthwise (groups == C == K) and dense (groups == 1) "
         "convolutions only";
}

std::vector<EngineConfigId> DirectConvConfigs(const ConvLayerProblem& problem) {
  if (!DirectConvRejection(problem).empty()) return {};
  if (IsDepthwise(problem)) return DepthwiseConfigs(problem);
  return GemmRejection(problem).empty() ? GemmConfigs(problem) : NarrowConfigs(problem);
}

std::string DirectConfigRejection(const ConvLayerProblem& problem, const EngineConfigId& id) {
  if (id.path != LayerPath::kDirect) return "not a direct-path configuration";
  if (std::string why = DirectConvRejection(problem); !why.empty()) return why;
  for (const EngineConfigId& known : DirectConvConfigs(problem)) {
    if (known == id) return "";
  }
  return absl::StrCat("the direct path has no configuration ", id.ToString());
}

}  // namespace convserve
