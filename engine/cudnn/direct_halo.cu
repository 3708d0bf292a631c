// The direct path's halo GEMM (engine 4 of engine/cudnn/direct_conv.h): a
// 3x3 conv with stride and dilation 1 on 32, 64 or 128 channels, float16 or
// bfloat16 channels-last. A block keeps the weights of its 32 or 64 output
// channels (9 taps of [K][C]) and their bias in shared memory for its life
// and loops over tiles of 4 or 8 output rows by 16 columns. For each tile
// it copies the input the tile reads, its rows and columns plus a 1-pixel
// halo (zeros outside the image), once (cp.async, the next tile's during
// this one's MMAs); each warp owns one output row of the tile, 16 pixels,
// and for each tap reads its A fragments from the halo with ldmatrix, whose
// per-lane row addresses do the im2col for free. So the input is read from
// global memory about 1.4-1.7 times, not 9 as a GEMM step per tap reads
// it (engine 1). The MMAs are wgmma with A from registers on sm_90a (one
// m64nK16 per 16 channels of a tap, the next tap's fragments loaded while
// they run), mma.sync elsewhere; the epilogue (bias, activation, one
// rounding) and the staged 16-byte stores are the pointwise pair kernel's
// (pointwise_pair_convs.cuh).
//
// It is for ResNet-50's 3x3 64 @ 56, where at batch 1 the implicit GEMM
// took 4.8 us (cuDNN 5.0-5.4) and at batch 32 cuDNN's kernel ran at 32% of
// its floor (docs/cudnn.md, "3x3 tiles with a halo").
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/activation.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/pointwise_pair_convs.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace pair_kernel {
namespace {

constexpr int kTaps = 3;  // R and S
constexpr int kColumns = static_cast<int>(kDirectHaloTileColumns);
constexpr int kHaloColumns = kColumns + kTaps - 1;

// Where a tile's output starts: the image, its first row and column.
struct HaloTile {
  int n, row, column;
};

// The tiles of a layer, numbered along the rows, then down, then by image;
// the divisions by fixed counts are multiplies (FastDivisor).
struct HaloTiles {
  FastDivisor across, down;  // tiles along a row, and down an image
  int rows;                  // output rows a tile

  __device__ HaloTile At(int tile) const {
    const int row_of_tiles = across.Divide(tile), n = down.Divide(row_of_tiles);
    return {n, down.Remainder(row_of_tiles, n) * rows,
            across.Remainder(tile, row_of_tiles) * kColumns};
  }
};

// A thread's part of each tile's input copy (kRows + 2 rows of
// kHaloColumns pixels, C channels each in rows of C + kPad elements, zeros
// outside the image): the same channel vector of the same halo pixels
// every tile, so their rows, columns and offsets in x are worked out once.
template <typename T, int kC, int kRows>
struct HaloCopier {
  static constexpr int kVectors = kC / 8, kRow = kC + kPad;
  static constexpr int kStride = 32 * kRows / kVectors;  // pixels between a thread's passes
  static constexpr int kPixels = (kRows + kTaps - 1) * kHaloColumns;
  static constexpr int kPasses = (kPixels + kStride - 1) / kStride;
  int first;                                  // the first pixel
  int shared;                                 // its vector's element in a halo buffer
  int row[kPasses], column[kPasses];          // pass i's pixel in the halo
  int offset[kPasses];                        // and its vector's element from the halo's corner

  __device__ HaloCopier(const DirectConvDims& d, int thread) {
    first = thread / kVectors;
    const int c = (thread % kVectors) * 8;
    shared = first * kRow + c;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int pixel = first + i * kStride;
      row[i] = pixel / kHaloColumns;
      column[i] = pixel % kHaloColumns;
      offset[i] = (row[i] * d.w + column[i]) * kC + c;
    }
  }

  // cp.async of tile `t`'s input into `halo`.
  __device__ void Copy(T* halo, const T* x, const DirectConvDims& d, const HaloTile& t) const {
    const int top = t.row - d.pad_h, left = t.column - d.pad_w;
    const int64_t corner = ((static_cast<int64_t>(t.n) * d.h + top) * d.w + left) * kC;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (kPixels % kStride != 0 && i == kPasses - 1 && first + i * kStride >= kPixels) break;
      const bool valid = static_cast<unsigned>(top + row[i]) < static_cast<unsigned>(d.h) &&
                         static_cast<unsigned>(left + column[i]) < static_cast<unsigned>(d.w);
      CopyAsync16(halo + shared + i * kStride * kRow, x + (valid ? corner + offset[i] : 0),
                  valid);
    }
  }
};

// The accumulators of output channels [32i, 32i + 32) of a block's kKb, as
// the pair's epilogue takes them (one m16 row block of 4 n8 blocks).
template <int kKb>
__device__ inline const float (&ChunkOf(const float (&acc)[kKb / 8][4], int i))[kM][4][4] {
  return *reinterpret_cast<const float(*)[kM][4][4]>(&acc[4 * i]);
}

// One tap's MMAs for the warp's 16 pixels (A fragments `a`) by the tap's
// weights `w` (kKb rows, swizzled as SwizzledWeight lays them out: wgmma
// reads them through descriptors, mma.sync's ldmatrix reads 8 rows of 16
// bytes in 8 distinct bank groups): one wgmma batch, issued and not waited
// for (`first`: d = A B), or mma.sync into `acc`.
// `w_descriptor`: WgmmaDescriptor64B(w), whose address field moves 16
// bytes a unit (a 32-element slice of kKb rows is kKb * 4 units).
template <typename T, int kC, int kKb>
__device__ inline void TapMmas(const unsigned (&a)[kC / 16][4], const T* w, uint64_t w_descriptor,
                               bool first, int b_row, int b_column, float (&acc)[kKb / 8][4]) {
  if constexpr (kWarpgroupPair) {
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kC / 16; ++k) {
      WgmmaRegisterA<T, kKb>(acc, a[k], w_descriptor + (k / 2) * kKb * 4 + 2 * (k % 2),
                             !first || k > 0);
    }
    WgmmaCommit();
  } else {
#pragma unroll
    for (int k = 0; k < kC / 16; ++k) {
#pragma unroll
      for (int n = 0; n < kKb / 8; n += 2) {
        unsigned b[4];
        LdMatrixX4(b, w + SwizzledWeight(kKb, n * 8 + b_row, k * 16 + b_column));
        Mma<T>(acc[n], a[k], b[0], b[1]);
        Mma<T>(acc[n + 1], a[k], b[2], b[3]);
      }
    }
  }
}

// kC: 32, 64 or 128 input channels; kRows: output rows a tile (one a warp);
// kKb: the block's output channels (32 or 64), from blockIdx.y * kKb.
// Shared memory as DirectHaloSharedBytes counts it: the weights (9 taps of
// [kKb][kC], swizzled), two halo buffers, each warp's staged rows [16][kKb
// + kPad] and the bias in float.
static_assert(kPad == 8, "DirectHaloSharedBytes pads rows by 8 elements");
template <typename T, int kC, int kRows, int kKb>
__global__ void __launch_bounds__(32 * kRows)
    HaloGemm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
             Activation activation, T* __restrict__ y, DirectConvDims d, HaloTiles tiling) {
  AwaitPreviousKernel();
  constexpr int kThreadCount = 32 * kRows, kRow = kC + kPad, kSteps = kC / 16;
  constexpr int kHaloPixels = (kRows + kTaps - 1) * kHaloColumns, kStagedRow = kKb + kPad;
  static_assert(kRows % 4 == 0, "whole warpgroups");
  const bool relu = activation.kind == ActivationKind::kRelu && activation.negative_slope == 0.f;
  const float clip = activation.has_upper_clip ? activation.upper_clip : INFINITY;
  // 1024: each tap's weights start on a 512-byte boundary (kKb * kC * 2
  // bytes a tap), where wgmma's swizzle repeats.
  extern __shared__ __align__(1024) unsigned char shared[];
  T* const shared_w = reinterpret_cast<T*>(shared);
  T* const shared_x = shared_w + kTaps * kTaps * kKb * kC;
  T* const staged_all = shared_x + 2 * kHaloPixels * kRow;
  float* const shared_bias = reinterpret_cast<float*>(staged_all + kRows * 16 * kStagedRow);
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int first_channel = blockIdx.y * kKb;

  // The block's weights: KRSC in global memory, so output channel k's tap
  // (r, s) is C contiguous elements at ((k * 3 + r) * 3 + s) * C.
  constexpr int kVectors = kC / 8;
  for (int v = thread; v < kTaps * kTaps * kKb * kVectors; v += kThreadCount) {
    const int c = (v % kVectors) * 8, row = (v / kVectors) % kKb, tap = v / (kVectors * kKb);
    T* const tap_w = shared_w + tap * kKb * kC;
    CopyAsync16(tap_w + SwizzledWeight(kKb, row, c),
                w + ((static_cast<int64_t>(first_channel) + row) * kTaps * kTaps + tap) * kC + c,
                true);
  }
  for (int i = thread; i < kKb; i += kThreadCount) {
    shared_bias[i] = bias != nullptr ? ToFloat(bias[first_channel + i]) : 0.f;
  }
  const int tiles = d.n * tiling.down.divisor * tiling.across.divisor;
  const HaloCopier<T, kC, kRows> copier(d, thread);
  int tile = blockIdx.x;
  HaloTile here = tiling.At(tile);
  if (tile < tiles) copier.Copy(shared_x, x, d, here);
  AwaitFirstCopies();
  // The weights' descriptor; a tap's are kKb * kC * 2 bytes on.
  const uint64_t w_descriptor = kWarpgroupPair ? WgmmaDescriptor64B(shared_w) : 0;

  const int g = lane >> 2, t = lane & 3;
  const int a_row = lane & 15, a_column = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_column = ((lane >> 3) & 1) * 8;
  T* const staged = staged_all + warp * 16 * kStagedRow;
  for (int buffer = 0; tile < tiles; tile += gridDim.x, buffer ^= 1) {
    const HaloTile next = tiling.At(tile + gridDim.x);
    if (tile + static_cast<int>(gridDim.x) < tiles) {
      copier.Copy(shared_x + (buffer ^ 1) * kHaloPixels * kRow, x, d, next);
    }
    CopyAsyncCommit();
    // The warp's output row of the tile reads halo rows warp .. warp + 2;
    // lane a_row's pixel at tap (r, s) is halo pixel (warp + r, a_row + s).
    const T* const halo = shared_x + buffer * kHaloPixels * kRow +
                          (warp * kHaloColumns + a_row) * kRow + a_column;
    const auto load = [&](int tap, unsigned(&a)[kSteps][4]) {
      const T* const pixel = halo + ((tap / kTaps) * kHaloColumns + tap % kTaps) * kRow;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) LdMatrixX4(a[s], pixel + s * 16);
    };
    float acc[kKb / 8][4];
    unsigned a[2][kSteps][4];
    if constexpr (kWarpgroupPair) {
      // Tap i's fragments are loaded while tap i - 1's batch runs; a
      // fragment set is reloaded only after the batch that read it is done.
      load(0, a[0]);
#pragma unroll
      for (int tap = 0; tap < kTaps * kTaps; ++tap) {
        TapMmas<T, kC, kKb>(a[tap & 1], shared_w + tap * kKb * kC,
                            w_descriptor + tap * kKb * kC / 8, tap == 0, b_row, b_column, acc);
        if (tap + 1 < kTaps * kTaps) {
          if (tap > 0) WgmmaWait<1>(acc);
          load(tap + 1, a[(tap + 1) & 1]);
        }
      }
      WgmmaWait<0>(acc);
    } else {
#pragma unroll
      for (int f = 0; f < kKb / 8; ++f) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[f][e] = 0.f;
      }
#pragma unroll 1
      for (int tap = 0; tap < kTaps * kTaps; ++tap) {
        load(tap, a[0]);
        TapMmas<T, kC, kKb>(a[0], shared_w + tap * kKb * kC, 0, false, b_row, b_column, acc);
      }
    }

    const HaloTile out = here;
    here = next;
    const int row = out.row + warp;
    const int64_t valid = row < d.p ? min(kColumns, d.q - out.column) : 0;
    T* const y_row =
        y + ((static_cast<int64_t>(out.n) * d.p + row) * d.q + out.column) * d.k + first_channel;
#pragma unroll
    for (int i = 0; i < kKb / 32; ++i) {
      unsigned packed[kM][2][4];
      if (relu) {
        HiddenChunk(ChunkOf<kKb>(acc, i), shared_bias, 32 * i, t,
                    PackRelu<T>{Pack<T>(clip, clip)}, packed);
      } else {
        WithKind(activation, HiddenEpilogue<T>{ChunkOf<kKb>(acc, i), packed, shared_bias,
                                               activation, 32 * i, t});
      }
      StageChunk<T>(packed, staged + 32 * i, kStagedRow, g, t);
    }
    __syncwarp();
    StoreStagedRows<T, kKb>(staged, kStagedRow, y_row, d.k, valid, lane);
    CopyAsyncWait<0>();
    __syncthreads();  // the halo read and the staged rows stored before they are overwritten
  }
}

template <typename T, int kC, int kRows, int kKb>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                    cudaStream_t stream) {
  const auto kernel = HaloGemm<T, kC, kRows, kKb>;
  constexpr int bytes = static_cast<int>(DirectHaloSharedBytes(kC, kRows, kKb));
  // Over the default 48 KiB; opted into once per device and thread.
  ASSIGN_OR_RETURN(const int per_sm,
                   PrepareKernel(reinterpret_cast<const void*>(kernel), 32 * kRows, bytes));
  const DirectConvDims d = DirectConvDimsOf(problem);
  const int64_t groups = d.k / kKb;
  const int64_t tiles = static_cast<int64_t>(d.n) * ((d.p + kRows - 1) / kRows) *
                        ((d.q + kColumns - 1) / kColumns);
  const int64_t sms = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 1);
  // Persistent: as many blocks as fit at once, each output channel group
  // its share of them, one tile a block at least.
  const int64_t blocks =
      std::max<int64_t>(1, std::min(tiles, (per_sm * sms + groups - 1) / groups));
  CUDA_RETURN_IF_ERROR(LaunchDependent(
      kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(groups)),
      dim3(32 * kRows), static_cast<size_t>(bytes), stream, static_cast<const T*>(b.x),
      static_cast<const T*>(b.w), static_cast<const T*>(b.bias), problem.activation,
      static_cast<T*>(b.y), d,
      pair_kernel::HaloTiles{FastDivisor::Of((d.q + kColumns - 1) / kColumns),
                             FastDivisor::Of((d.p + kRows - 1) / kRows), kRows}));
  return absl::OkStatus();
}

// Launch, for the tiles whose shared memory a block may have (no kernel is
// built for the others, which DirectConvConfigs never lists).
template <typename T, int kC, int kRows, int kKb>
absl::Status LaunchIfItFits(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                            cudaStream_t stream) {
  if constexpr (DirectHaloSharedBytes(kC, kRows, kKb) <= kDirectMaxSharedBytes) {
    return Launch<T, kC, kRows, kKb>(problem, b, stream);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "the halo GEMM's tile of ", kRows, " rows by ", kKb, " channels on ", kC,
        " input channels needs more shared memory than a block may have"));
  }
}

template <typename T, int kC>
absl::Status DispatchTile(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                          int64_t rows, int64_t channels, cudaStream_t stream) {
  if (rows == 4 && channels == 32) return LaunchIfItFits<T, kC, 4, 32>(problem, b, stream);
  if (rows == 4 && channels == 64) return LaunchIfItFits<T, kC, 4, 64>(problem, b, stream);
  if (rows == 8 && channels == 32) return LaunchIfItFits<T, kC, 8, 32>(problem, b, stream);
  if (rows == 8 && channels == 64) return LaunchIfItFits<T, kC, 8, 64>(problem, b, stream);
  return absl::InvalidArgumentError(
      absl::StrCat("the halo GEMM has no tile of ", rows, " rows by ", channels, " channels"));
}

template <typename T>
absl::Status DispatchChannels(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                              int64_t rows, int64_t channels, cudaStream_t stream) {
  switch (problem.input[1]) {
    case 32: return DispatchTile<T, 32>(problem, b, rows, channels, stream);
    case 64: return DispatchTile<T, 64>(problem, b, rows, channels, stream);
    case 128: return DispatchTile<T, 128>(problem, b, rows, channels, stream);
  }
  return absl::InvalidArgumentError("the halo GEMM is built for 32, 64 or 128 input channels");
}

}  // namespace
}  // namespace pair_kernel

absl::Status LaunchDirectHalo(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream) {
  // The kernel assumes a 3x3 window and the rest (it would read past the
  // weights otherwise): checked at every launch, a few comparisons.
  if (std::string why = DirectHaloRejection(problem); !why.empty()) {
    return absl::InvalidArgumentError(why);
  }
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 <
      kDirectHaloComputeCapability) {
    return absl::FailedPreconditionError(
        "the direct halo GEMM needs mma.sync (compute capability 8.0)");
  }
  const int64_t rows = DirectKnob(id, kDirectKnobTileRows);
  const int64_t channels = DirectKnob(id, kDirectKnobTileChannels);
  if (channels <= 0 || problem.output[1] % channels != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), " does not divide the layer's ", problem.output[1],
                     " output channels"));
  }
  switch (problem.dtype) {
    case DType::kFloat16:
      return pair_kernel::DispatchChannels<__half>(problem, buffers, rows, channels, stream);
    case DType::kBFloat16:
      return pair_kernel::DispatchChannels<__nv_bfloat16>(problem, buffers, rows, channels,
                                                          stream);
    case DType::kFloat32:
      break;
  }
  return absl::InvalidArgumentError("the direct halo GEMM runs float16 and bfloat16 only");
}

}  // namespace convserve
