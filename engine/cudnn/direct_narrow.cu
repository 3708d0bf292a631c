// The direct path's narrow implicit GEMM (engine 2 of
// engine/cudnn/direct_conv.h): dense channels-last layers with short kernel
// rows, like a network's first conv.
//
// The conv as a GEMM: rows are output pixels, columns output channels, the
// reduction runs over R kernel rows of S*C elements each. With dilation 1
// along W, kernel row r of output pixel q reads S*C contiguous elements of
// input row h(r), starting stride_w*C elements after pixel q-1's. A block
// keeps the input rows its tile reads (kWarps*32 consecutive output pixels
// of one output row) in shared memory, zeros where the window falls in the
// padding, and each warp reads its mma.sync A fragments there with 32-bit
// loads: no im2col copy.
//
// A block takes a contiguous run of tiles, going down a column of tiles
// (output rows p, p+1, ...), and keeps the `span` input rows a tile reads
// in a ring: the next tile needs only stride_h new rows (2 of the stem's 7).
//
// The reduction is laid out in 16-byte groups (DirectNarrowLayout): a
// kernel row is padded to `groups` groups and an MMA step (m16n8k16, or
// m16n8k8 TF32 for float32) takes two, so less than a group per kernel row
// is padding (the stem's rows of 21 take 24 elements). A fragment's
// elements past S*C are masked to zero, so a NaN or infinity there does not
// meet the zero weight; the weights are zero there too.
//
// A block owns 64 output channels (grid y) and keeps all their weights in
// shared memory, copied 16 bytes a load from the layer's packed copy
// (DirectNarrowPackedWeights: already in this layout, float32 already
// rounded to TF32, as the staged input is rounded when staged). A
// warp computes 32 pixels (two m16 tiles), or 16 (one, knob 8: twice the
// warps a tile), by the 64 channels and writes them from its registers
// after bias, activation and one rounding. The input rows' copies are in
// narrow_staging.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/narrow_staging.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace {

using narrow::kGroup;
using narrow::NarrowDims;
using narrow::StageRows;

constexpr int kChannels = static_cast<int>(kDirectNarrowTileChannels);
// The kernels' activation: a kind fixed at compile time, or kAnyActivation
// (the kind read at run time, for the rarer ones).
constexpr int kAnyActivation = -1;

// The 32 bits of a fragment at `p`: two 16-bit elements (p 4-byte aligned
// when kAligned) or one float.
template <typename T, bool kAligned>
__device__ inline unsigned LoadFragment(const T* p) {
  if constexpr (sizeof(T) == 4 || kAligned) {
    return *reinterpret_cast<const unsigned*>(p);
  } else {
    const auto* half = reinterpret_cast<const unsigned short*>(p);
    return half[0] | (static_cast<unsigned>(half[1]) << 16);
  }
}

// Which of the bits LoadFragment read at reduction element `element` of a
// kernel row belong to elements before `row` (the rest are masked).
template <typename T>
__device__ inline unsigned ElementMask(int element, int row) {
  if constexpr (sizeof(T) == 4) {
    return element < row ? ~0u : 0u;
  } else {
    return element + 1 < row ? ~0u : (element < row ? 0xFFFFu : 0u);
  }
}

// The activation of kind read at run time: one call, so its switch is
// compiled once rather than inlined at each of a thread's 64 outputs (which
// tripled the file's compile time).
__device__ __noinline__ float AnyActivation(const Activation& activation, float x) {
  return ApplyActivation(activation, x);
}

template <int kActivation>
__device__ inline float Act(const Activation& activation, float x) {
  if constexpr (kActivation == kAnyActivation) {
    return AnyActivation(activation, x);
  } else {
    return Activate<static_cast<ActivationKind>(kActivation)>(activation, x);
  }
}

// Warps resident per SM the registers are budgeted for: 16 (128 registers a
// thread). Left alone the compiler took 152 for the float16 ReLU kernel, so
// 3 blocks of 4 warps an SM instead of 4.
constexpr int kResidentWarps = 16;

// kWarpPixels: a warp's output pixels, 32 (two m16 tiles) or 16 (one).
template <typename T, int kWarps, int kWarpPixels, bool kAligned, int kActivation>
__global__ void __launch_bounds__(32 * kWarps, kResidentWarps / kWarps)
    NarrowGemm(const T* __restrict__ x, const T* __restrict__ packed,
               const T* __restrict__ bias, T* __restrict__ y, NarrowDims d,
               Activation activation) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kThreads = 32 * kWarps;
  constexpr int kTilePixels = kWarpPixels * kWarps;
  constexpr int kTiles = kWarpPixels / 16;  // m16 tiles a warp
  static_assert(kTiles == 1 || kTiles == 2, "one or two m16 tiles a warp");
  static_assert(kTilePixels % kGroup<T> == 0, "every tile's rows start at one group phase");
  constexpr int kG = kGroup<T>;
  extern __shared__ __align__(128) unsigned char shared[];
  // [kChannels][weight_stride], the ring of [2 * span][input_stride] and
  // the steps' table; each 16-byte aligned.
  T* weights = reinterpret_cast<T*>(shared);
  T* ring = weights + kChannels * d.weight_stride;
  int4* table = reinterpret_cast<int4*>(ring + 2 * d.span * d.input_stride);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, t = lane & 3;
  const int channel0 = blockIdx.y * kChannels;

  // The block's channels' packed weights, one run of 16-byte groups.
  const T* const tile_weights = packed + static_cast<int64_t>(channel0) * d.weight_stride;
  for (int i = threadIdx.x; i < kChannels * d.weight_stride / kG; i += kThreads) {
    CopyAsync16(weights + i * kG, tile_weights + i * kG, true);
  }
  CopyAsyncCommit();
  // Step s's two groups: where they start relative to the tile's first
  // staged row (kernel row r is r * dilation_h rows below it) and their
  // first element in the kernel row (`row` past the last group: masked).
  for (int step = threadIdx.x; step < d.steps; step += kThreads) {
    int entry[4];
    for (int half = 0; half < 2; ++half) {
      const int group = 2 * step + half, r = d.by_groups.Divide(group);
      const int first = (group - r * d.groups) * kG;
      entry[half] = r < d.r ? r * d.dilation_h * d.input_stride + first : 0;
      entry[2 + half] = r < d.r ? first : d.row;
    }
    table[step] = make_int4(entry[0], entry[1], entry[2], entry[3]);
  }
  // This thread's output channels: 8f + 2t and 8f + 2t + 1.
  float bias0[kChannels / 8], bias1[kChannels / 8];
#pragma unroll
  for (int f = 0; f < kChannels / 8; ++f) {
    const int channel = channel0 + 8 * f + 2 * t;
    const bool real = bias != nullptr && channel < d.k;
    bias0[f] = real ? ToFloat(bias[channel]) : 0.f;
    bias1[f] = real ? ToFloat(bias[channel + 1]) : 0.f;
  }

  // This thread's fragment elements within a group: a pair at 2t (16-bit)
  // or one at t (float), for pixel rows g and g + 8 of each m16 tile.
  const int lane_element = sizeof(T) == 4 ? t : 2 * t;
  int a_offset[kTiles][2];
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      a_offset[m][h] = (warp * kWarpPixels + 16 * m + 8 * h + g) * d.pixel_step + lane_element;
    }
  }
  // ldmatrix.x4 rows of this lane: channels 16f + (lane & 7) + 8 (lane >> 4),
  // the step's first or second group (as the implicit GEMM's B fragments).
  int b_offset[kChannels / 16];
#pragma unroll
  for (int f = 0; f < kChannels / 16; ++f) {
    b_offset[f] = (16 * f + (lane & 7) + ((lane >> 4) << 3)) * d.weight_stride +
                  ((lane >> 3) & 1) * kG;
  }
  // The weights, the table and the biases (no kernel writes them) are on
  // their way before the wait; the input is not read before it
  // (dependent_launch.h).
  AwaitPreviousKernel();
  CopyAsyncWait<0>();  // the weights are in, for the first tile's barrier

  // This block's tiles, in the order (n, column tile, p): p fastest.
  const int per_block = (d.tiles + gridDim.x - 1) / gridDim.x;
  const int tile_begin = blockIdx.x * per_block;
  const int tile_end = min(d.tiles, tile_begin + per_block);
  // The ring holds input rows [staged_top, staged_top + span) of column
  // `staged_column`, row h at slots RingSlot(h) and RingSlot(h) + span, so a
  // tile's rows are consecutive slots from RingSlot(top).
  int staged_column = -1, staged_top = 0;
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int column = d.by_p.Divide(tile);  // n * column_tiles + column tile
    const int p = tile - column * d.p;
    const int n = d.by_column_tiles.Divide(column);
    const int q0 = (column - n * d.column_tiles) * kTilePixels;
    const int top = p * d.stride_h - d.pad_h;  // the tile's first input row
    // The staged rows start at the first element of the tile's first window.
    const int first = (q0 * d.stride_w - d.pad_w) * d.c;
    // Rows [from, top + span) are new; the ring has the rest.
    const int from =
        column == staged_column ? max(top, min(staged_top + d.span, top + d.span)) : top;
    __syncthreads();  // no warp still reads the rows these replace (or the weights are in)
    StageRows<T, kThreads>(x, d, ring, n, from, max(top + d.span - from, 0), first);
    staged_column = column;
    staged_top = top;
    __syncthreads();
    if (tile + 1 == tile_end) ReleaseDependents();  // the block's last tile

    const int pixel0 = q0 + warp * kWarpPixels;
    if (pixel0 >= d.q) continue;
    float acc[kTiles][kChannels / 8][4];
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
#pragma unroll
      for (int f = 0; f < kChannels / 8; ++f) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][f][e] = 0.f;
      }
    }
    const T* rows = ring + RingSlot(d, top) * d.input_stride;
    // The steps for the first m16 tiles (one, or both when the second has
    // a pixel), so the loop has no branch.
    const auto steps = [&](auto tiles) {
      constexpr int kUsed = decltype(tiles)::value;
      for (int step = 0; step < d.steps; ++step) {
        const int4 entry = table[step];
        const unsigned mask0 = ElementMask<T>(entry.z + lane_element, d.row);
        const unsigned mask1 = ElementMask<T>(entry.w + lane_element, d.row);
        unsigned a[kUsed][4];
#pragma unroll
        for (int m = 0; m < kUsed; ++m) {
          a[m][0] = LoadFragment<T, kAligned>(rows + entry.x + a_offset[m][0]) & mask0;
          a[m][1] = LoadFragment<T, kAligned>(rows + entry.x + a_offset[m][1]) & mask0;
          a[m][2] = LoadFragment<T, kAligned>(rows + entry.y + a_offset[m][0]) & mask1;
          a[m][3] = LoadFragment<T, kAligned>(rows + entry.y + a_offset[m][1]) & mask1;
        }
#pragma unroll
        for (int f = 0; f < kChannels / 16; ++f) {
          unsigned b[4];
          LdMatrixX4(b, weights + b_offset[f] + step * 2 * kG);
#pragma unroll
          for (int m = 0; m < kUsed; ++m) {
            Mma<T>(acc[m][2 * f], a[m], b[0], b[1]);
            Mma<T>(acc[m][2 * f + 1], a[m], b[2], b[3]);
          }
        }
      }
    };
    if (kTiles == 2 && pixel0 + 16 < d.q) {
      steps(std::integral_constant<int, kTiles>());
    } else {
      steps(std::integral_constant<int, 1>());
    }

    // Thread (g, t) holds, per m16 tile m and n8 block f, pixels 16m + g and
    // 16m + g + 8 at channels 8f + 2t and 8f + 2t + 1.
    const int image_row = n * d.p + p;
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = pixel0 + 16 * m + 8 * h + g;
        if (q >= d.q) continue;
        T* out = y + (image_row * d.q + q) * d.k + channel0 + 2 * t;
#pragma unroll
        for (int f = 0; f < kChannels / 8; ++f) {
          if (channel0 + 8 * f >= d.k) break;
          StoreTwo<T>(out + 8 * f, Act<kActivation>(activation, acc[m][f][2 * h] + bias0[f]),
                      Act<kActivation>(activation, acc[m][f][2 * h + 1] + bias1[f]));
        }
      }
    }
  }
#endif
}

NarrowDims DimsOf(const ConvLayerProblem& problem, const DirectNarrowLayout& l,
                  int tile_pixels) {
  NarrowDims d;
  static_cast<DirectConvDims&>(d) = DirectConvDimsOf(problem);
  d.row = static_cast<int>(l.row);
  d.groups = static_cast<int>(l.groups);
  d.steps = static_cast<int>(l.steps);
  d.pixel_step = static_cast<int>(l.pixel_step);
  d.weight_stride = static_cast<int>(l.weight_stride);
  d.input_stride = static_cast<int>(l.input_stride);
  d.span = static_cast<int>(l.span);
  d.column_tiles = (d.q + tile_pixels - 1) / tile_pixels;
  d.tiles = d.n * d.column_tiles * d.p;
  const int group = 16 / static_cast<int>(DTypeSize(problem.dtype));
  d.by_input_stride = FastDivisor::Of(d.input_stride);
  d.by_groups = FastDivisor::Of(d.groups);
  d.by_span = FastDivisor::Of(d.span);
  d.by_p = FastDivisor::Of(d.p);
  d.by_column_tiles = FastDivisor::Of(d.column_tiles);
  d.wrap_bias = (d.pad_h + d.span - 1) / d.span * d.span;
  // Every input row starts on a 16-byte boundary where W*C is a multiple of
  // a group (x is 16-byte aligned: binding checks it). A tile's staged rows
  // start at element (q0 * stride_w - pad_w) * C, and q0 * stride_w * C (q0
  // a multiple of 64) is a multiple of a group.
  const bool by_group = d.w * d.c % group == 0;
  d.vector_phase = by_group ? ((-d.pad_w * d.c) % group + group) % group : -1;
  d.staged_groups = by_group ? (d.vector_phase + d.input_stride + group - 1) / group : 1;
  d.by_staged_groups = FastDivisor::Of(d.staged_groups);
  return d;
}

template <typename T, int kWarps, int kWarpPixels, bool kAligned, int kActivation>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                    cudaStream_t stream) {
  constexpr int kThreads = 32 * kWarps;
  constexpr int kTilePixels = kWarpPixels * kWarps;
  const DirectNarrowLayout layout = DirectNarrowLayoutOf(problem, kTilePixels);
  const NarrowDims d = DimsOf(problem, layout, kTilePixels);
  const int bytes = static_cast<int>(layout.shared_bytes);
  const int limit = CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  if (bytes > limit) {
    return absl::ResourceExhaustedError(absl::StrCat("the narrow GEMM needs ", bytes,
                                                     " bytes of shared memory; this GPU has ",
                                                     limit, " per block"));
  }
  const auto kernel = NarrowGemm<T, kWarps, kWarpPixels, kAligned, kActivation>;
  // A grid of the blocks that fit at once (by registers, shared memory and
  // threads), each taking a run of tiles, so each copies its weights once.
  // The shared memory (over the default 48 KiB) is opted into, and the
  // blocks an SM holds looked up, once per thread, kernel, device and size.
  ASSIGN_OR_RETURN(const int resident,
                   PrepareKernel(reinterpret_cast<const void*>(kernel), kThreads, bytes));
  const int sms = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 1);
  const int channel_tiles = (d.k + kChannels - 1) / kChannels;
  const int blocks = std::min(d.tiles, std::max(1, sms * resident / channel_tiles));
  // Not spread one block an SM (SpreadSharedBytes): at batch 1 the stem
  // (112 blocks) took 8.33 us spread against 7.50, 14.6 against 12.8 in
  // float32 (an H200, host BS, when every dtype copied its weights element
  // by element), likely because fewer of the next launch's blocks then
  // copied their weights before the wait.
  CUDA_RETURN_IF_ERROR(LaunchDependent(
      kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(channel_tiles)),
      dim3(kThreads), static_cast<size_t>(bytes), stream, static_cast<const T*>(b.x),
      static_cast<const T*>(b.w_narrow), static_cast<const T*>(b.bias), static_cast<T*>(b.y), d,
      problem.activation));
  return absl::OkStatus();
}

// ReLU (clipped or leaky too) and identity, the common activations, are
// compiled in; the rest are read at run time.
template <typename T, int kWarps, int kWarpPixels, bool kAligned>
absl::Status DispatchActivation(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                                cudaStream_t stream) {
  constexpr int kRelu = static_cast<int>(ActivationKind::kRelu);
  constexpr int kIdentity = static_cast<int>(ActivationKind::kIdentity);
  switch (problem.activation.kind) {
    case ActivationKind::kRelu:
      return Launch<T, kWarps, kWarpPixels, kAligned, kRelu>(problem, b, stream);
    case ActivationKind::kIdentity:
      return Launch<T, kWarps, kWarpPixels, kAligned, kIdentity>(problem, b, stream);
    default:
      return Launch<T, kWarps, kWarpPixels, kAligned, kAnyActivation>(problem, b, stream);
  }
}

// 16-bit fragments load as 32 bits where every pixel's row starts at an
// even element (stride_w*C even), else as two halves.
template <typename T, int kWarps, int kWarpPixels>
absl::Status DispatchAlignment(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                               cudaStream_t stream) {
  if constexpr (sizeof(T) == 4) {
    return DispatchActivation<T, kWarps, kWarpPixels, true>(problem, b, stream);
  } else {
    if (problem.stride[1] * problem.input[1] % 2 == 0) {
      return DispatchActivation<T, kWarps, kWarpPixels, true>(problem, b, stream);
    }
    return DispatchActivation<T, kWarps, kWarpPixels, false>(problem, b, stream);
  }
}

// 128-pixel tiles in 4 warps of 32 pixels or 8 of 16, 64-pixel tiles in 2
// of 32 (the configurations DirectConvConfigs lists).
template <typename T>
absl::Status DispatchTile(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                          int64_t tile_pixels, int64_t warp_pixels, cudaStream_t stream) {
  if (warp_pixels == 16) return DispatchAlignment<T, 8, 16>(problem, b, stream);
  if (tile_pixels == 128) return DispatchAlignment<T, 4, 32>(problem, b, stream);
  return DispatchAlignment<T, 2, 32>(problem, b, stream);
}

}  // namespace

absl::Status LaunchDirectNarrow(const ConvLayerProblem& problem, const EngineConfigId& id,
                                const ConvLayerBuffers& buffers, cudaStream_t stream) {
  const int64_t tile_pixels = DirectKnob(id, kDirectKnobTilePixels);
  const int64_t warp_pixels = DirectKnob(id, kDirectKnobWarpPixels);
  const bool listed = (tile_pixels == 128 && (warp_pixels == 0 || warp_pixels == 16)) ||
                      (tile_pixels == 64 && warp_pixels == 0);
  if (!listed) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), " is not a configuration of the direct narrow GEMM"));
  }
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 <
      kDirectNarrowComputeCapability) {
    return absl::FailedPreconditionError(
        "the direct narrow GEMM needs mma.sync (compute capability 8.0)");
  }
  if (buffers.w_narrow == nullptr) {
    return absl::InvalidArgumentError(
        "the direct narrow GEMM needs its packed weights (ConvLayerBuffers::w_narrow)");
  }
  switch (problem.dtype) {
    case DType::kFloat16:
      return DispatchTile<__half>(problem, buffers, tile_pixels, warp_pixels, stream);
    case DType::kBFloat16:
      return DispatchTile<__nv_bfloat16>(problem, buffers, tile_pixels, warp_pixels, stream);
    case DType::kFloat32:
      return DispatchTile<float>(problem, buffers, tile_pixels, warp_pixels, stream);
  }
  return absl::InvalidArgumentError("the direct narrow GEMM: unknown dtype");
}

}  // namespace convserve
