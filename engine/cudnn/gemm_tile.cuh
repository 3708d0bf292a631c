// The implicit GEMM's tile (engine/cudnn/direct_gemm.cu): the layer's sizes
// as the kernel sees them, where a step and the partial sums sit in shared
// memory, and how the tile's output rows are written.
#ifndef CONVSERVE_ENGINE_CUDNN_GEMM_TILE_CUH_
#define CONVSERVE_ENGINE_CUDNN_GEMM_TILE_CUH_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/cudnn/wgmma.cuh"

namespace convserve {
namespace gemm {

constexpr int kGroupWarps = 4;
constexpr int kGroupThreads = 32 * kGroupWarps;
constexpr int kGroups = 4;
constexpr int kThreads = kGroups * kGroupThreads;
constexpr int kTilePixels = static_cast<int>(kDirectGemmTilePixels);
constexpr int kTileShift = 6;  // log2(kTilePixels)
constexpr int kStages = 4;
// A step's row (of one pixel or one output channel): its elements, and its
// 16-byte segments; two MMAs of 32 bytes of the reduction each.
// (DirectGemmChunk of its dtype, at compile time)
template <typename T>
constexpr int kChunk = static_cast<int>(kDirectGemmChunkBytes) / static_cast<int>(sizeof(T));
template <typename T>
constexpr int kSegmentElements = 16 / static_cast<int>(sizeof(T));
constexpr int kSegments = static_cast<int>(kDirectGemmChunkBytes) / 16;
[[maybe_unused]] constexpr int kMmaSteps = kSegments / 2;
static_assert(kTilePixels == 16 * kGroupWarps, "a warp owns 16 pixel rows");
static_assert(kTilePixels == 1 << kTileShift, "kTileShift");
static_assert(kSegments == 4, "the swizzle spreads 4 segments over the banks");

// The layer's sizes and the GEMM's.
struct GemmDims : DirectConvDims {
  int pixels;     // n * p * q
  int reduction;  // r * s * c: one output channel's weights
  int chunks;     // reduction / DirectGemmChunk(dtype), which is kChunk<T>
  // p * q, q, c and s: a thread's setup divided its pixels and its first
  // step by them at run time, and those divisions were 21-39% of the
  // instructions the kernel executed on batch-1 layers (Nsight Compute, per
  // SASS instruction), all issued before the first copy.
  FastDivisor per_image, by_q, by_c, by_s;
};

// Where segment `segment` (16 bytes) of row `row` of a step's tile sits,
// in elements: rows of 64 bytes, segments XOR-swizzled so the 8 rows one
// ldmatrix reads fall in 8 distinct bank groups.
template <typename T>
[[maybe_unused]] __host__ __device__ constexpr int Swizzled(int row, int segment) {
  return row * kChunk<T> + (segment ^ ((row >> 1) & 3)) * kSegmentElements<T>;
}

// Whether a group multiplies with wgmma (sm_90a code) or mma.sync. float
// needs its weights rounded to TF32 beforehand for wgmma (`kTf32Weights`,
// ConvLayerBuffers::w_tf32): wgmma drops a float's low 13 bits, and
// rounding the stage in shared memory made float32 layers slower than
// mma.sync with rounded fragments (docs/cudnn.md).
template <typename T, bool kTf32Weights>
constexpr bool kWarpgroupMma =
    CONVSERVE_WGMMA && (!std::is_same_v<T, float> || kTf32Weights);

// A group's step in a stage: 64 pixel rows, then kTileChannels weight rows.
template <typename T, int kTileChannels>
constexpr int kStepElements = (kTilePixels + kTileChannels) * kChunk<T>;

// Partial sums, [kTilePixels][kPartialStride] floats per group; the padding
// spreads a warp's float2 writes over the banks.
template <int kTileChannels>
constexpr int kPartialStride = kTileChannels + 8;
template <int kTileChannels>
constexpr int kPartialFloats = kTilePixels * kPartialStride<kTileChannels>;

// The stages, which the groups' partial sums overwrite; split (`splits` >
// 1), then the mailbox: a tile of sums, those cluster block r sent from
// row r * 64 / splits on, and its barrier.
template <typename T, int kTileChannels>
__host__ __device__ constexpr size_t StageBytes() {
  const size_t stages = size_t{kStages} * kGroups * kStepElements<T, kTileChannels> * sizeof(T);
  const size_t partial = size_t{kGroups} * kPartialFloats<kTileChannels> * sizeof(float);
  return stages > partial ? stages : partial;
}
template <typename T, int kTileChannels>
constexpr size_t SharedBytes(int splits) {
  const size_t mailbox = kPartialFloats<kTileChannels> * sizeof(float) + sizeof(uint64_t);
  return StageBytes<T, kTileChannels>() + (splits > 1 ? mailbox : 0);
}

// Bias plus activation, rounded, for output channels `channel` and
// `channel + 1` of `pixel`.
template <typename T, ActivationKind K>
__device__ inline void StorePair(T* y, const T* bias, const Activation& activation,
                                 const GemmDims& d, int pixel, int channel, float v0, float v1) {
  if (bias != nullptr) {
    v0 += ToFloat(bias[channel]);
    v1 += ToFloat(bias[channel + 1]);
  }
  StoreTwo<T>(y + pixel * d.k + channel, Activate<K>(activation, v0),
              Activate<K>(activation, v1));
}

// The output of rows [row_begin, row_end) of a tile, by all the block's
// threads: for each element the sum of this block's groups' partial sums
// (splits == 1), or of the sums every cluster block sent it (`partial` is
// then the mailbox, block r's from row r * (row_end - row_begin) on); then
// bias, activation and one rounding.
template <typename T, int kTileChannels>
struct TileOutput {
  const float* partial;  // in this block's shared memory
  T* y;
  const T* bias;
  const Activation& activation;
  const GemmDims& d;
  int pixel0, channel0, row_begin, row_end, splits;

  template <ActivationKind K>
  __device__ void Run() const {
    constexpr int kPairs = kTileChannels / 2;
    for (int e = threadIdx.x; e < (row_end - row_begin) * kPairs; e += kThreads) {
      const int row = row_begin + e / kPairs;
      const int column = 2 * (e % kPairs);
      const int pixel = pixel0 + row, channel = channel0 + column;
      if (pixel >= d.pixels || channel >= d.k) continue;
      const int offset = row * kPartialStride<kTileChannels> + column;
      float2 sum = make_float2(0.f, 0.f);
      if (splits == 1) {
#pragma unroll
        for (int group = 0; group < kGroups; ++group) {
          const float2 part = *reinterpret_cast<const float2*>(
              partial + group * kPartialFloats<kTileChannels> + offset);
          sum.x += part.x;
          sum.y += part.y;
        }
      } else {
        const int per_block = (row_end - row_begin) * kPartialStride<kTileChannels>;
        const float* mine = partial + (row - row_begin) * kPartialStride<kTileChannels> + column;
#pragma unroll
        for (int rank = 0; rank < kDirectGemmMaxSplits; ++rank) {
          if (rank < splits) {
            const float2 part = *reinterpret_cast<const float2*>(mine + rank * per_block);
            sum.x += part.x;
            sum.y += part.y;
          }
        }
      }
      StorePair<T, K>(y, bias, activation, d, pixel, channel, sum.x, sum.y);
    }
  }
};

}  // namespace gemm
}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_GEMM_TILE_CUH_
