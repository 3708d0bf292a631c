// The halo GEMM's parts (engine/cudnn/direct_halo.cu has the kernel): its
// tiles, the copy of a tile's input with its halo, a tap's MMAs, the
// epilogue and the split taps' sums along the cluster.
#ifndef CONVSERVE_ENGINE_CUDNN_HALO_TILE_CUH_
#define CONVSERVE_ENGINE_CUDNN_HALO_TILE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "engine/activation.h"
#include "engine/cudnn/cluster_mailbox.cuh"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/pointwise_pair_convs.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/cudnn/wgmma.cuh"

namespace convserve {
namespace pair_kernel {

constexpr int kTaps = 3;  // R and S
static_assert(kDirectHaloSplit == kTaps, "split taps: a kernel row a block");
constexpr int kColumns = static_cast<int>(kDirectHaloTileColumns);
constexpr int kHaloColumns = kColumns + kTaps - 1;
static_assert(kVector<__half> == kPad, "DirectHaloSharedBytes pads rows by 16 bytes");

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

// A thread's part of each tile's input copy (kHaloRows rows of
// kHaloColumns pixels, C channels each in rows of C + kVector elements, zeros
// outside the image): the same channel vector of the same halo pixels
// every tile, so their rows, columns and offsets in x are worked out once.
// kRows + 2 rows from the tile's first row less the padding, or with split
// taps kRows from there plus the block's kernel row (`row_offset`).
template <typename T, int kC, int kRows, int kHaloRows>
struct HaloCopier {
  static constexpr int kVectors = kC / kVector<T>, kRow = kC + kVector<T>;
  static constexpr int kStride = 32 * kRows / kVectors;  // pixels between a thread's passes
  static constexpr int kPixels = kHaloRows * kHaloColumns;
  static constexpr int kPasses = (kPixels + kStride - 1) / kStride;
  int first;                                  // the first pixel
  int shared;                                 // its vector's element in a halo buffer
  int row[kPasses], column[kPasses];          // pass i's pixel in the halo
  int offset[kPasses];                        // and its vector's element from the halo's corner

  __device__ HaloCopier(const DirectConvDims& d, int thread) {
    first = thread / kVectors;
    const int c = (thread % kVectors) * kVector<T>;
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
  __device__ void Copy(T* halo, const T* x, const DirectConvDims& d, const HaloTile& t,
                       int row_offset) const {
    const int top = t.row - d.pad_h + row_offset, left = t.column - d.pad_w;
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

// cp.async of a block's weights, kBlockTaps taps from `first_tap` (in
// kernel-row order) of kKb output channels from `first_channel`, tap by tap
// as SwizzledWeight lays them out. In global memory they are KRSC: output
// channel k's tap (r, s) is kC contiguous elements at ((k * 3 + r) * 3 + s)
// * kC.
template <typename T, int kC, int kKb, int kBlockTaps>
__device__ inline void CopyWeights(T* shared_w, const T* w, int first_channel, int first_tap,
                                   int thread, int threads) {
  constexpr int kVectors = kC / kVector<T>;
  for (int v = thread; v < kBlockTaps * kKb * kVectors; v += threads) {
    const int c = (v % kVectors) * kVector<T>, row = (v / kVectors) % kKb;
    const int tap = v / (kVectors * kKb);
    const int64_t channel_taps = static_cast<int64_t>(first_channel + row) * kTaps * kTaps;
    CopyAsync16(shared_w + tap * kKb * kC + SwizzledWeight<sizeof(T)>(kKb, row, c),
                w + (channel_taps + first_tap + tap) * kC + c, true);
  }
}

// The accumulators of output channels [32i, 32i + 32) of a block's kKb, as
// the pair's epilogue takes them (one m16 row block of 4 n8 blocks).
template <int kKb>
__device__ inline const float (&ChunkOf(const float (&acc)[kKb / 8][4], int i))[kM][4][4] {
  return *reinterpret_cast<const float(*)[kM][4][4]>(&acc[4 * i]);
}

// A float tile's epilogue for the warp's 16 rows: bias and activation on
// each accumulator, staged in pairs (StoreTwo; rows of `pitch` floats from
// `staged`) where thread (g, t) holds them: rows g and g + 8, columns 8f +
// 2t and 8f + 2t + 1 of n8 block f.
template <int kKb>
struct FloatEpilogue {
  const float (&acc)[kKb / 8][4];
  const float* bias;  // shared memory, kKb floats
  const Activation& activation;
  float* staged;
  int pitch, g, t;

  template <ActivationKind K>
  __device__ void Run() const {
#pragma unroll
    for (int f = 0; f < kKb / 8; ++f) {
      const int column = 8 * f + 2 * t;
      const float b0 = bias[column], b1 = bias[column + 1];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        StoreTwo<float>(staged + (g + 8 * half) * pitch + column,
                        Activate<K>(activation, acc[f][2 * half] + b0),
                        Activate<K>(activation, acc[f][2 * half + 1] + b1));
      }
    }
  }
};

// The warp's tile row out: bias, activation and (16-bit) rounding on its
// accumulators, staged in `staged` (16 rows `pitch` elements apart), then
// stored 16 bytes a lane to `valid` output pixels from `y_row`, `y_pitch`
// elements apart. A plain or clipped ReLU on 16 bits runs on the rounded
// pairs.
template <typename T, int kKb>
__device__ inline void StoreTile(const float (&acc)[kKb / 8][4], const float* bias,
                                 const Activation& activation, T* staged, int pitch, int lane,
                                 T* y_row, int64_t y_pitch, int64_t valid) {
  const int g = lane >> 2, t = lane & 3;
  if constexpr (std::is_same_v<T, float>) {
    WithKind(activation, FloatEpilogue<kKb>{acc, bias, activation, staged, pitch, g, t});
  } else {
    const bool relu = activation.kind == ActivationKind::kRelu && activation.negative_slope == 0.f;
    const float clip = activation.has_upper_clip ? activation.upper_clip : INFINITY;
#pragma unroll
    for (int i = 0; i < kKb / 32; ++i) {
      unsigned packed[kM][2][4];
      if (relu) {
        HiddenChunk(ChunkOf<kKb>(acc, i), bias, 32 * i, t, PackRelu<T>{Pack<T>(clip, clip)},
                    packed);
      } else {
        WithKind(activation,
                 HiddenEpilogue<T>{ChunkOf<kKb>(acc, i), packed, bias, activation, 32 * i, t});
      }
      StageChunk<T>(packed, staged + 32 * i, pitch, g, t);
    }
  }
  __syncwarp();
  StoreStagedRows<T, kKb>(staged, pitch, y_row, y_pitch, valid, lane);
}

// The `count` float weights a block keeps in shared memory rounded to
// TF32 in place, for a caller with no rounded copy (ConvLayerBuffers::
// w_tf32), by the block's `threads` threads: visible to wgmma's async
// proxy and to every thread after it.
__device__ inline void RoundWeightsToTf32(float* w, int count, int thread, int threads) {
  for (int i = thread; i < count; i += threads) w[i] = __uint_as_float(Tf32Bits(w[i]));
  if constexpr (kWarpgroupPair) FenceProxyAsyncShared();
  __syncthreads();
}

// One tap's MMAs for the warp's 16 pixels (A fragments `a`) by the tap's
// weights `w` (kKb rows, swizzled as SwizzledWeight lays them out: wgmma
// reads them through descriptors, mma.sync's ldmatrix reads 8 rows of 16
// bytes in 8 distinct bank groups): one wgmma batch, issued and not waited
// for (`first`: d = A B), or mma.sync into `acc`.
// `w_descriptor`: WgmmaDescriptor64B(w), whose address field moves 16
// bytes a unit (a 64-byte slice of kKb rows is kKb * 4 units).
template <typename T, int kC, int kKb>
__device__ inline void TapMmas(const unsigned (&a)[kC / kMmaChannels<T>][4], const T* w,
                               uint64_t w_descriptor, bool first, int b_row, int b_column,
                               float (&acc)[kKb / 8][4]) {
  constexpr int kSteps = kC / kMmaChannels<T>;
  if constexpr (kWarpgroupPair) {
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      WgmmaRegisterA<T, kKb>(acc, a[k], w_descriptor + (k / 2) * kKb * 4 + 2 * (k % 2),
                             !first || k > 0);
    }
    WgmmaCommit();
  } else {
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
#pragma unroll
      for (int n = 0; n < kKb / 8; n += 2) {
        unsigned b[4];
        LdMatrixX4(b, w + SwizzledWeight<sizeof(T)>(kKb, n * 8 + b_row,
                                                    k * kMmaChannels<T> + b_column));
        Mma<T>(acc[n], a[k], b[0], b[1]);
        Mma<T>(acc[n + 1], a[k], b[2], b[3]);
      }
    }
  }
}

// Split taps: the cluster's blocks add their sums along a chain. Block
// kSplit - 1 sends its to block kSplit - 2, which adds them to its own and
// sends those on, down to block 0, which writes the tile
// (cluster_mailbox.cuh). A block's mailbox `box` (kKb / 2 floats a thread,
// a thread's 4 at a time contiguous, thread-minor) holds one tile's sums:
// its block signals the sender when it has read them (the sender's
// barriers[1]), and the sender waits for that before sending its next
// tile's. barriers[0] counts the bytes in. `step` counts the block's tiles;
// after the `last` one no signal goes out (its sender may have left).
template <int kKb, int kSplit>
__device__ inline void AddClusterSums(float (&acc)[kKb / 8][4], float* box, uint64_t* barriers,
                                      int thread, int step, bool last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kQuads = kKb / 8;  // of a thread's values: acc[q]
  const int threads = static_cast<int>(blockDim.x);
  const unsigned rank = blockIdx.z, parity = static_cast<unsigned>(step) & 1;
  if (rank + 1 < kSplit) {
    AwaitMail(barriers, parity);
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(box + (q * threads + thread) * 4);
      acc[q][0] += v.x;
      acc[q][1] += v.y;
      acc[q][2] += v.z;
      acc[q][3] += v.w;
    }
    __syncthreads();  // every thread has read the mailbox
    if (thread == 0) {
      ExpectMail(barriers, static_cast<unsigned>(kQuads * threads * sizeof(float4)));
      if (!last) SignalPeer(barriers + 1, rank + 1);
    }
  }
  if (rank > 0) {
    if (step > 0) AwaitMail(barriers + 1, parity ^ 1);
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      SendToPeer(make_float4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]),
                 box + (q * threads + thread) * 4, barriers, rank - 1);
    }
  }
#endif
}

}  // namespace pair_kernel
}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_HALO_TILE_CUH_
