// The pointwise pair kernel's arithmetic for one warp's rows of a tile
// (engine/cudnn/pointwise_pair.cu has the kernel around it): its tile
// shape, the first conv's epilogue (bias, activation, rounding into the
// second conv's A fragments) and both convs, as warpgroup MMAs (sm_90a) or
// mma.sync. Included by pointwise_pair.cu and by direct_pointwise.cu
// (the pointwise GEMM: the first conv on its own).
#ifndef CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_CONVS_CUH_
#define CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_CONVS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "engine/activation.h"
#include "engine/cudnn/device_dtype.cuh"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/cudnn/wgmma.cuh"

namespace convserve {
namespace pair_kernel {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16;
// m16 row blocks per warp.
constexpr int kM = kRowsPerWarp / 16;
constexpr int kTile = static_cast<int>(kPointwisePairTile);
constexpr int kChunk = static_cast<int>(kPointwisePairChunk);
constexpr int kPad = static_cast<int>(kPointwisePairPad);
static_assert(kTile == kWarps * kRowsPerWarp, "a tile is one row block per warp");
static_assert(kChunk == 32, "the epilogue of a chunk fills two k16 A fragments");
// Elements of T in 16 bytes (a copy, an ldmatrix row, the rows' padding),
// and in the 32 bytes of channels one MMA takes.
template <typename T>
constexpr int kVector = 16 / static_cast<int>(sizeof(T));
template <typename T>
constexpr int kMmaChannels = 2 * kVector<T>;

// Two sums (bias added), activated and rounded to T as one register: for
// any activation, each activated in float, then rounded.
template <typename T, typename Activate>
struct PackActivated {
  Activate activate;
  __device__ unsigned operator()(float lo, float hi) const {
    return Pack<T>(activate(lo), activate(hi));
  }
};
// For a (clipped) ReLU, rounded first and then clipped as a pair, two
// instructions for two elements where float min/max took four; the same
// values (rounding is monotonic, and 0 and the rounded clip are
// representable). max returns the operand that is not NaN, so NaN becomes
// 0 as in float, and takes +0 over -0, so a sum rounding to -0 gives +0.
template <typename T>
struct PackRelu {
  unsigned clip;  // the clip, rounded to T, in both halves
  __device__ unsigned operator()(float lo, float hi) const {
    static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
    unsigned v = Pack<T>(lo, hi);
    if constexpr (std::is_same_v<T, __half>) {
      asm("max.f16x2 %0, %0, %1;\nmin.f16x2 %0, %0, %2;\n" : "+r"(v) : "r"(0u), "r"(clip));
    } else {
      asm("max.bf16x2 %0, %0, %1;\nmin.bf16x2 %0, %0, %2;\n" : "+r"(v) : "r"(0u), "r"(clip));
    }
    return v;
  }
};

// The first conv's epilogue for one 32-channel chunk starting at `chunk`:
// accumulators (kM row blocks of 16 x 4 column blocks of 8) plus bias,
// activated and rounded (`pack`), into the A fragments of the second
// conv (kM row blocks x 2 k16 steps). In m16n8k16, thread (g, t) holds C
// elements (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of an n8 block, and A
// registers (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..) of a k16
// step: two adjacent n8 blocks are one k16 step's A.
template <typename Packer>
__device__ inline void HiddenChunk(const float (&acc)[kM][4][4], const float* bias, int chunk, int t,
                                   const Packer& pack, unsigned (&a)[kM][2][4]) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int lo = chunk + 16 * k + 2 * t, hi = lo + 8;
    const float b_lo0 = bias[lo], b_lo1 = bias[lo + 1], b_hi0 = bias[hi], b_hi1 = bias[hi + 1];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float(&left)[4] = acc[m][2 * k];
      const float(&right)[4] = acc[m][2 * k + 1];
      a[m][k][0] = pack(left[0] + b_lo0, left[1] + b_lo1);
      a[m][k][1] = pack(left[2] + b_lo0, left[3] + b_lo1);
      a[m][k][2] = pack(right[0] + b_hi0, right[1] + b_hi1);
      a[m][k][3] = pack(right[2] + b_hi0, right[3] + b_hi1);
    }
  }
}

// HiddenChunk for any activation (WithKind picks K once per chunk).
template <typename T>
struct HiddenEpilogue {
  const float (&acc)[kM][4][4];
  unsigned (&a)[kM][2][4];
  const float* bias;  // shared memory, C1 floats
  const Activation& activation;
  int chunk, t;

  template <ActivationKind K>
  __device__ void Run() const {
    HiddenChunk(acc, bias, chunk, t, PackActivated<T, KindActivation<K>>{{activation}}, a);
  }
};

// Whether the convs run as warpgroup MMAs (sm_90a code) or mma.sync.
constexpr bool kWarpgroupPair = CONVSERVE_WGMMA;

// Where element k of row `row` of a weight matrix with `rows` rows sits in
// shared memory for wgmma: in slices of 64 bytes of the reduction (32
// elements of 2 bytes, 16 floats), each slice `rows` rows of 64 bytes
// whose 16-byte segments are XOR-swizzled as WgmmaDescriptor64B reads them.
template <int kElementBytes = 2>
__device__ inline int SwizzledWeight(int rows, int row, int k) {
  constexpr int kSlice = 64 / kElementBytes, kSegment = 16 / kElementBytes;
  return (k / kSlice) * rows * kSlice + row * kSlice +
         (((k % kSlice) / kSegment) ^ ((row >> 1) & 3)) * kSegment + k % kSegment;
}

// Copies tile `tile` of x (kTile pixels of C0 channels) into input buffer
// `buffer` from `shared_x` (rows of C0 elements and 16 bytes) with
// cp.async; pixels past the last as zeros (their outputs are not stored).
template <typename T, int kC0>
__device__ inline void CopyInputTile(T* shared_x, int buffer, const T* x, int64_t tile,
                                     int64_t pixels, int thread) {
  constexpr int kRow0 = kC0 + kVector<T>, kVectors0 = kC0 / kVector<T>;
  for (int v = thread; v < kTile * kVectors0; v += kThreads) {
    const int r = v / kVectors0, c = (v % kVectors0) * kVector<T>;
    const int64_t pixel = tile * kTile + r;
    const bool valid = pixel < pixels;
    CopyAsync16(shared_x + (buffer * kTile + r) * kRow0 + c, x + (valid ? pixel * kC0 + c : 0),
                valid);
  }
}

// A bias (null: none) into shared memory as `n` floats.
template <typename T>
__device__ inline void CopyBias(float* shared_bias, const T* bias, int n, int thread) {
  for (int i = thread; i < n; i += kThreads) {
    shared_bias[i] = bias != nullptr ? ToFloat(bias[i]) : 0.f;
  }
}

// Waits for the block's first copies (cp.async: weights and first tile)
// and makes them visible to every thread, and to wgmma, which reads the
// weights through the async proxy (each thread fences its own copies
// before the barrier).
__device__ inline void AwaitFirstCopies() {
  CopyAsyncCommit();
  CopyAsyncWait<0>();
  if constexpr (kWarpgroupPair) FenceProxyAsyncShared();
  __syncthreads();
}

// Copies the warp's first `rows` staged rows of kColumns elements (`pitch`
// elements apart in shared memory) to rows of Y `y_pitch` elements apart
// from `y`, 16 bytes a lane: a warp stores whole 32-byte sectors (whole
// 128-byte lines for 64 16-bit columns), where the fragments' own 4-byte
// stores used half of each sector they sent (ncu on an H200).
template <typename T, int kColumns>
__device__ inline void StoreStagedRows(const T* staged, int pitch, T* y, int64_t y_pitch,
                                       int64_t rows, int lane) {
  constexpr int kVectors = kColumns * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElements = 16 / static_cast<int>(sizeof(T));
  static_assert(kRowsPerWarp * kVectors % 32 == 0, "whole warps of vectors");
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kVectors / 32; ++i) {
    const int v = 32 * i + lane;
    const int row = v / kVectors, column = (v % kVectors) * kElements;
    if (row < rows) {
      *reinterpret_cast<uint4*>(y + row * y_pitch + column) =
          *reinterpret_cast<const uint4*>(staged + row * pitch + column);
    }
  }
}

// Writes a chunk's rounded values (`a`: the layout of the second conv's A
// fragments in the pair, HiddenChunk) into the warp's 16 staged rows of
// `pitch` elements, 32 columns from `staged`: register k*4 + i holds row g
// (i even) or g + 8 (i odd), columns 16k + 2t (i < 2) or 16k + 8 + 2t.
template <typename T>
__device__ inline void StageChunk(const unsigned (&a)[kM][2][4], T* staged, int pitch, int g,
                                  int t) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1), column = 16 * k + 8 * (i >> 1) + 2 * t;
      *reinterpret_cast<unsigned*>(staged + row * pitch + column) = a[0][k][i];
    }
  }
}

// Copies the first conv's weights ([c1][C0], C0 contiguous) into shared
// memory as its MMAs read them: swizzled (SwizzledWeight) for wgmma, rows
// of C0 + kPad elements for mma.sync. cp.async: the caller commits and
// waits (and fences for wgmma).
template <typename T, int kC0>
__device__ inline void CopyFirstWeights(T* shared_w0, const T* w0, int c1, int thread) {
  constexpr int kRow0 = kC0 + kPad, kVectors0 = kC0 / 8;
  for (int v = thread; v < c1 * kVectors0; v += kThreads) {
    const int r = v / kVectors0, c = (v % kVectors0) * 8;
    CopyAsync16(shared_w0 + (kWarpgroupPair ? SwizzledWeight(c1, r, c) : r * kRow0 + c),
                w0 + r * kC0 + c, true);
  }
}

// The first conv of the 32 channels from `chunk` for the warpgroup's 64
// rows (A fragments `x`, from registers) into `acc`, issued and committed
// as one batch, not waited for (d = A B: no zeros to write).
template <typename T, int kC0>
__device__ inline void FirstConvWgmma(const unsigned (&x)[kM][kC0 / 16][4], const T* shared_w0,
                                      int c1, int chunk, float (&acc)[kM][4][4]) {
  WgmmaFence();
#pragma unroll
  for (int k = 0; k < kC0 / 16; ++k) {
    WgmmaRegisterA<T, kChunk>(
        acc[0], x[0][k],
        WgmmaDescriptor64B(shared_w0 + SwizzledWeight(c1, chunk, 32 * (k / 2))) + 2 * (k % 2),
        k > 0);
  }
  WgmmaCommit();
}

// The same with mma.sync, into `acc` (which holds zeros or sums to add
// to): B fragments of w0 [c1][C0 + pad] loaded by ldmatrix.
template <typename T, int kC0>
__device__ inline void FirstConvMma(const unsigned (&x)[kM][kC0 / 16][4], const T* shared_w0,
                                    int chunk, int b_row, int b_column, float (&acc)[kM][4][4]) {
  constexpr int kRow0 = kC0 + kPad;
#pragma unroll
  for (int k = 0; k < kC0 / 16; ++k) {
#pragma unroll
    for (int n = 0; n < 4; n += 2) {
      unsigned b[4];
      LdMatrixX4(b, shared_w0 + (chunk + n * 8 + b_row) * kRow0 + k * 16 + b_column);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        Mma<T>(acc[m][n], x[m][k], b[0], b[1]);
        Mma<T>(acc[m][n + 1], x[m][k], b[2], b[3]);
      }
    }
  }
}

// Both convs for the warp's rows of a tile (`x`: their A fragments),
// into the second conv's accumulators; `hidden(acc0, a, chunk)` is the
// first conv's epilogue for each chunk. With mma.sync each warp reads the
// weights' B fragments with ldmatrix (w0 [C1][C0 + pad], w1 [C2][C1 +
// pad]). With wgmma the warpgroup (64 rows) multiplies its A fragments,
// from registers, by the weights in shared memory, swizzled
// (SwizzledWeight), one instruction per k16 step, asynchronously: see the
// steps below.
template <typename T, int kC0, int kC2, typename Hidden>
__device__ inline void TileConvs(const unsigned (&x)[kM][kC0 / 16][4], const T* shared_w0,
                                 const T* shared_w1, int c1, int b_row, int b_column,
                                 const Hidden& hidden, float (&acc1)[kM][kC2 / 8][4]) {
  constexpr int kBlocks2 = kC2 / 8;
  if constexpr (kWarpgroupPair) {
    static_assert(kM == 1, "a warp holds 16 rows of its warpgroup's 64");
    static_assert(kC0 % 32 == 0 && (kC2 == 32 || kC2 == 64),
                  "whole 32-element weight slices (SwizzledWeight) and a WgmmaRegisterA of N = C2");
    WgmmaFenceOperands(acc1[0]);  // its zeros written before the first batch
    const auto first_conv = [&](int chunk, float(&acc)[kM][4][4]) {
      FirstConvWgmma<T, kC0>(x, shared_w0, c1, chunk, acc);
    };
    // The chunk's epilogue into `a`, then its part of the second conv.
    const auto second_conv = [&](int chunk, const float(&acc)[kM][4][4], unsigned(&a)[kM][2][4]) {
      hidden(acc, a, chunk);
      WgmmaFence();
      const uint64_t w1_slice = WgmmaDescriptor64B(shared_w1 + SwizzledWeight(kC2, 0, chunk));
#pragma unroll
      for (int k = 0; k < 2; ++k) WgmmaRegisterA<T, kC2>(acc1[0], a[0][k], w1_slice + 2 * k);
      WgmmaCommit();
    };
    // Two chunks a step, their first convs into two sets of accumulators,
    // both issued at once: the tensor cores run the second chunk's first
    // conv during the first chunk's epilogue. (The A fragments `a` are one
    // set: the second epilogue waits for the first chunk's second conv.)
    // Nothing is in flight from one step to the next: ptxas serializes
    // every wgmma of a loop whose in-flight accumulators cross its back
    // edge. Steps of 8 chunks, straight-line code, were no faster (H200).
    int chunk = 0;
#pragma unroll 1
    for (; chunk + 2 * kChunk <= c1; chunk += 2 * kChunk) {
      float acc0[2][kM][4][4];
      unsigned a[kM][2][4];
      first_conv(chunk, acc0[0]);
      first_conv(chunk + kChunk, acc0[1]);
      WgmmaWait<1>(acc0[0][0]);
      second_conv(chunk, acc0[0], a);
      WgmmaWait<0>(acc0[1][0]);
      second_conv(chunk + kChunk, acc0[1], a);
      WgmmaWait<0>(acc1[0]);
    }
    if (chunk < c1) {  // an odd chunk count: the last alone
      float acc0[kM][4][4];
      unsigned a[kM][2][4];
      first_conv(chunk, acc0);
      WgmmaWait<0>(acc0[0]);
      second_conv(chunk, acc0, a);
      WgmmaWait<0>(acc1[0]);
    }
  } else {
    const int row1 = c1 + kPad;
#pragma unroll 1
    for (int chunk = 0; chunk < c1; chunk += kChunk) {
      float acc0[kM][4][4] = {};
      FirstConvMma<T, kC0>(x, shared_w0, chunk, b_row, b_column, acc0);
      unsigned a[kM][2][4];
      hidden(acc0, a, chunk);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
#pragma unroll
        for (int n = 0; n < kBlocks2; n += 2) {
          unsigned b[4];
          LdMatrixX4(b, shared_w1 + (n * 8 + b_row) * row1 + chunk + k * 16 + b_column);
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            Mma<T>(acc1[m][n], a[m][k], b[0], b[1]);
            Mma<T>(acc1[m][n + 1], a[m][k], b[2], b[3]);
          }
        }
      }
    }
  }
}

}  // namespace pair_kernel
}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_POINTWISE_PAIR_CONVS_CUH_
