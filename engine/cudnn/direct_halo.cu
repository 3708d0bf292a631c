// The direct path's halo GEMM (engine 4 of engine/cudnn/direct_conv.h): a 3x3
// conv with stride and dilation 1 on 32, 64 or 128 channels, float16 or
// bfloat16 channels-last, or float32 on 32 or 64 (in TF32). A block keeps the
// weights of its 32 or 64 output channels (9 taps of [K][C]) and their bias in
// shared memory for its life and loops over tiles of 4 or 8 output rows by 16
// columns. For each tile it copies the input the tile reads, its rows and
// columns plus a 1-pixel halo (zeros outside the image), once (cp.async, the
// next tile's during this one's MMAs); each warp owns one output row of the
// tile, 16 pixels, and for each tap reads its A fragments from the halo with
// ldmatrix, whose per-lane row addresses do the im2col for free. So the input
// is read from global memory about 1.4-1.7 times, not 9 as a GEMM step per tap
// reads it (engine 1). The MMAs are wgmma with A from registers on sm_90a (one
// m64nK per 32 bytes of a tap's channels, the next tap's fragments loaded
// while they run), mma.sync elsewhere; the epilogue (bias, activation, one
// rounding) and the staged 16-byte stores are the pointwise pair kernel's
// (pointwise_pair_convs.cuh).
//
// Every address is worked out in bytes the same way for each dtype: a
// float layer's C channels lie as a 16-bit layer's 2C would, and one MMA
// takes 32 bytes of a tap's channels (k16, or k8 in TF32 with its A
// fragments rounded in registers). Its weights must be rounded to TF32 in
// shared memory too: the caller's rounded copy (ConvLayerBuffers::w_tf32)
// is copied, or else the block rounds its copy once.
//
// It is for ResNet-50's 3x3 64 @ 56, where at batch 1 the implicit GEMM
// took 4.8 us (cuDNN 5.0-5.4) and at batch 32 cuDNN's kernel ran at 32% of
// its floor (docs/cudnn.md, "3x3 tiles with a halo").
//
// Split taps (knob 7, sm_90), for 256 input channels (float32: 128 and 256),
// whose 9 taps of weights do not fit in shared memory: on a layer of few
// tiles (batch 1) each of a cluster's 3 blocks (grid z) takes one kernel
// row's 3 taps: it keeps their weights only, a third, and copies the tile's
// input rows shifted by its kernel row, no halo rows. Block 2 sends its float
// sums to block 1, which adds them to its own and sends those to block 0,
// which adds them to its own (distributed shared memory, a fixed order) and
// writes the tile. A tap's 512 or 1024 bytes of channels are multiplied 256
// bytes at a time, so that its A fragments fit in registers.
// (On 64 and 128 16-bit channels the split lost to the whole window a block.)
// Where two halo buffers do not fit beside a split tile's weights (float32
// 256; 8-row tiles on 256 16-bit or 128 float32 channels), one does (knob
// 9): the next tile's input is copied after this tile's MMAs, during its
// sums and epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/activation.h"
#include "engine/cudnn/cluster_mailbox.cuh"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/halo_tile.cuh"
#include "engine/cudnn/pointwise_pair_convs.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace pair_kernel {
namespace {

// kC: 32, 64, 128 or 256 input channels; kRows: output rows a tile (one a
// warp); kKb: the block's output channels (32 or 64), from blockIdx.y *
// kKb; kSplit: 1, or 3 blocks of a cluster (grid z) taking a kernel row's
// taps each; kBuffers: 2 halo buffers (the next tile's input copied during
// this tile's MMAs) or 1 (copied after them, during the epilogue). Shared
// memory as DirectHaloSharedBytes counts it: the weights (9 / kSplit taps
// of [kKb][kC], swizzled), the halo buffers, each warp's staged rows
// [16][kKb + kVector], the bias in float and, split, the mailbox of each
// thread's sums and its two barriers. `round_weights` (float only): the
// weights are rounded to TF32 once they are in.
template <typename T, int kC, int kRows, int kKb, int kSplit, int kBuffers>
__global__ void __launch_bounds__(32 * kRows)
    HaloGemm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
             Activation activation, T* __restrict__ y, DirectConvDims d, HaloTiles tiling,
             bool round_weights) {
  static_assert(kSplit == 1 || kSplit == kTaps, "whole kernel rows a block");
  static_assert(kBuffers == 1 || kBuffers == 2);
  constexpr bool kFloat = std::is_same_v<T, float>;
  // A tap's fragments are loaded at most 256 bytes of channels at a time
  // (kLoadC channels, kParts loads, kSteps MMAs each).
  constexpr int kLoadC = kC * sizeof(T) < 256 ? kC : 256 / sizeof(T), kParts = kC / kLoadC;
  constexpr int kSteps = kLoadC / kMmaChannels<T>;
  constexpr int kBlockTaps = kTaps * kTaps / kSplit, kLoads = kBlockTaps * kParts;
  constexpr int kHaloRows = kSplit == 1 ? kRows + kTaps - 1 : kRows;
  constexpr int kThreadCount = 32 * kRows, kRow = kC + kVector<T>;
  constexpr int kHaloPixels = kHaloRows * kHaloColumns, kStagedRow = kKb + kVector<T>;
  static_assert(kRows % 4 == 0, "whole warpgroups");
  // The block's kernel row, split; its taps are kernel_row * 3 on.
  const int kernel_row = kSplit == 1 ? 0 : static_cast<int>(blockIdx.z);
  // 1024: each tap's weights start on a 512-byte boundary (kKb * kC * 2
  // or 4 bytes a tap), where wgmma's swizzle repeats.
  extern __shared__ __align__(1024) unsigned char shared[];
  T* const shared_w = reinterpret_cast<T*>(shared);
  T* const shared_x = shared_w + kBlockTaps * kKb * kC;
  T* const staged_all = shared_x + kBuffers * kHaloPixels * kRow;
  float* const shared_bias = reinterpret_cast<float*>(staged_all + kRows * 16 * kStagedRow);
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int first_channel = blockIdx.y * kKb;

  CopyWeights<T, kC, kKb, kBlockTaps>(shared_w, w, first_channel, kernel_row * kTaps, thread,
                                      kThreadCount);
  for (int i = thread; i < kKb; i += kThreadCount) {
    shared_bias[i] = bias != nullptr ? ToFloat(bias[first_channel + i]) : 0.f;
  }
  // Split: the mailbox, kKb / 2 floats a thread, and its two barriers.
  [[maybe_unused]] float* const box = shared_bias + kKb;
  [[maybe_unused]] uint64_t* const barriers =
      reinterpret_cast<uint64_t*>(box + kKb / 2 * kThreadCount);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kSplit > 1) {
    if (thread == 0) {
      InitMailbox(barriers, static_cast<unsigned>(kKb / 2 * kThreadCount * sizeof(float)));
      InitSignal(barriers + 1);
    }
    AnnounceMailboxes();
  }
#endif
  // The weights and bias (no kernel writes them) are on their way before
  // the wait; the input is not read before it (dependent_launch.h).
  AwaitPreviousKernel();
  const int tiles = d.n * tiling.down.divisor * tiling.across.divisor;
  const HaloCopier<T, kC, kRows, kHaloRows> copier(d, thread);
  int tile = blockIdx.x;
  HaloTile here = tiling.At(tile);
  if (tile < tiles) copier.Copy(shared_x, x, d, here, kernel_row);
  AwaitFirstCopies();
  if constexpr (kFloat) {
    if (round_weights) RoundWeightsToTf32(shared_w, kBlockTaps * kKb * kC, thread, kThreadCount);
  }
  // The weights' descriptor; a tap's are kKb * kC * sizeof(T) bytes on.
  const uint64_t w_descriptor = kWarpgroupPair ? WgmmaDescriptor64B(shared_w) : 0;

  const int a_row = lane & 15, a_column = (lane >> 4) * kVector<T>;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_column = ((lane >> 3) & 1) * kVector<T>;
  T* const staged = staged_all + warp * 16 * kStagedRow;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kSplit > 1) AwaitPeerMailboxes();
#endif
  for (int buffer = 0, step = 0; tile < tiles;
       tile += gridDim.x, buffer ^= kBuffers - 1, ++step) {
    const HaloTile next = tiling.At(tile + gridDim.x);
    const bool last = tile + static_cast<int>(gridDim.x) >= tiles;
    if constexpr (kBuffers == 2) {
      if (!last) copier.Copy(shared_x + (buffer ^ 1) * kHaloPixels * kRow, x, d, next, kernel_row);
      CopyAsyncCommit();
    }
    // The warp's output row of the tile reads halo rows warp .. warp + 2
    // (split: row warp, the block's kernel row already in the copy); lane
    // a_row's pixel at tap (r, s) is halo pixel (warp + r, a_row + s).
    const T* const halo = shared_x + buffer * kHaloPixels * kRow +
                          (warp * kHaloColumns + a_row) * kRow + a_column;
    // Load i: tap i / kParts, its channels from kLoadC * (i % kParts),
    // rounded to TF32 for float; its weights' first element (slices of 64
    // bytes of channels by kKb rows) and descriptor (16-byte units).
    const auto load = [&](int i, unsigned(&a)[kSteps][4]) {
      const int tap = i / kParts;
      const T* const pixel = halo + ((tap / kTaps) * kHaloColumns + tap % kTaps) * kRow +
                             (i % kParts) * kLoadC;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        LdMatrixX4(a[s], pixel + s * kMmaChannels<T>);
        RoundToTf32<T>(a[s]);
      }
    };
    const auto weights_of = [](int i) {
      return (i / kParts) * kKb * kC + (i % kParts) * kLoadC * kKb;
    };
    float acc[kKb / 8][4];
    unsigned a[2][kSteps][4];
    if constexpr (kWarpgroupPair) {
      // Load i's fragments are loaded while load i - 1's batch runs; a
      // fragment set is reloaded only after the batch that read it is done.
      load(0, a[0]);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        TapMmas<T, kLoadC, kKb>(a[i & 1], shared_w + weights_of(i),
                                w_descriptor + weights_of(i) * static_cast<int>(sizeof(T)) / 16,
                                i == 0, b_row, b_column, acc);
        if (i + 1 < kLoads) {
          if (i > 0) WgmmaWait<1>(acc);
          load(i + 1, a[(i + 1) & 1]);
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
      for (int i = 0; i < kLoads; ++i) {
        load(i, a[0]);
        TapMmas<T, kLoadC, kKb>(a[0], shared_w + weights_of(i), 0, false, b_row, b_column, acc);
      }
    }
    if constexpr (kBuffers == 1) {
      __syncthreads();  // every warp has read the halo
      if (!last) copier.Copy(shared_x, x, d, next, kernel_row);
      CopyAsyncCommit();
    }
    if (last) ReleaseDependents();
    if constexpr (kSplit > 1) AddClusterSums<kKb, kSplit>(acc, box, barriers, thread, step, last);

    const HaloTile out = here;
    here = next;
    if (kSplit > 1 && kernel_row != 0) {  // block 0 of the cluster writes the tile
      CopyAsyncWait<0>();
      __syncthreads();
      continue;
    }
    const int row = out.row + warp;
    const int64_t valid = row < d.p ? min(kColumns, d.q - out.column) : 0;
    T* const y_row =
        y + ((static_cast<int64_t>(out.n) * d.p + row) * d.q + out.column) * d.k + first_channel;
    StoreTile<T, kKb>(acc, shared_bias, activation, staged, kStagedRow, lane, y_row, d.k,
                      valid);
    CopyAsyncWait<0>();
    __syncthreads();  // the halo read and the staged rows stored before they are overwritten
  }
}

template <typename T, int kC, int kRows, int kKb, int kSplit, int kBuffers>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                    cudaStream_t stream) {
  const auto kernel = HaloGemm<T, kC, kRows, kKb, kSplit, kBuffers>;
  constexpr int bytes =
      static_cast<int>(DirectHaloSharedBytes(kC, kRows, kKb, kSplit, sizeof(T), kBuffers));
  // Over the default 48 KiB; opted into once per device and thread.
  ASSIGN_OR_RETURN(const int per_sm,
                   PrepareKernel(reinterpret_cast<const void*>(kernel), 32 * kRows, bytes));
  const DirectConvDims d = DirectConvDimsOf(problem);
  const int64_t groups = d.k / kKb;
  const int64_t tiles = static_cast<int64_t>(d.n) * ((d.p + kRows - 1) / kRows) *
                        ((d.q + kColumns - 1) / kColumns);
  const int64_t sms = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 1);
  // Persistent: as many blocks as fit at once, each output channel group
  // (and kernel row, split) its share of them, one tile a block at least.
  const int64_t blocks = std::max<int64_t>(
      1, std::min(tiles, (per_sm * sms + groups * kSplit - 1) / (groups * kSplit)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(groups), kSplit);
  config.blockDim = dim3(32 * kRows);
  // A cluster's blocks may share an SM; spread, too few clusters could fit.
  config.dynamicSmemBytes =
      kSplit == 1 ? SpreadSharedBytes(bytes, blocks * groups, tiles * groups) : bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  SetClusterAndDependentLaunch(kSplit, attrs, &config);
  // float: the weights' TF32 copy where the caller has one.
  const bool rounded = std::is_same_v<T, float> && b.w_tf32 != nullptr;
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(
      &config, kernel, static_cast<const T*>(b.x),
      static_cast<const T*>(rounded ? b.w_tf32 : b.w), static_cast<const T*>(b.bias),
      problem.activation, static_cast<T*>(b.y), d,
      pair_kernel::HaloTiles{FastDivisor::Of((d.q + kColumns - 1) / kColumns),
                             FastDivisor::Of((d.p + kRows - 1) / kRows), kRows},
      std::is_same_v<T, float> && !rounded));
  return absl::OkStatus();
}

// Launch, for the tiles DirectConvConfigs lists (DirectHaloBuffers; no
// kernel is built for the others).
template <typename T, int kC, int kRows, int kKb, int kSplit, int kBuffers>
absl::Status LaunchIfListed(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                            cudaStream_t stream) {
  if constexpr (DirectHaloBuffers(kC, kRows, kKb, kSplit, sizeof(T)) == kBuffers) {
    return Launch<T, kC, kRows, kKb, kSplit, kBuffers>(problem, b, stream);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "the halo GEMM has no tile of ", kRows, " rows by ", kKb, " channels on ", kC,
        " input channels with taps split ", kSplit, " ways and ", kBuffers,
        " halo buffers (it would need more shared memory than a block may have, or fits "
        "with two)"));
  }
}

template <typename T, int kC, int kSplit, int kBuffers>
absl::Status DispatchTile(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                          int64_t rows, int64_t channels, cudaStream_t stream) {
  if (rows == 4 && channels == 32) {
    return LaunchIfListed<T, kC, 4, 32, kSplit, kBuffers>(problem, b, stream);
  }
  if (rows == 4 && channels == 64) {
    return LaunchIfListed<T, kC, 4, 64, kSplit, kBuffers>(problem, b, stream);
  }
  if (rows == 8 && channels == 32) {
    return LaunchIfListed<T, kC, 8, 32, kSplit, kBuffers>(problem, b, stream);
  }
  if (rows == 8 && channels == 64) {
    return LaunchIfListed<T, kC, 8, 64, kSplit, kBuffers>(problem, b, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the halo GEMM has no tile of ", rows, " rows by ", channels, " channels"));
}

template <typename T, int kC>
absl::Status DispatchSplit(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                           int64_t rows, int64_t channels, int64_t buffers,
                           cudaStream_t stream) {
  return buffers == 1 ? DispatchTile<T, kC, kTaps, 1>(problem, b, rows, channels, stream)
                      : DispatchTile<T, kC, kTaps, 2>(problem, b, rows, channels, stream);
}

// Unsplit (two halo buffers) on 32 input channels up to
// kDirectHaloMaxUnsplitBytes of them (128 of 16 bits, 64 float), split on
// more, up to 256 (the configurations DirectConvConfigs lists).
template <typename T>
absl::Status DispatchChannels(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                              int64_t rows, int64_t channels, int64_t split, int64_t buffers,
                              cudaStream_t stream) {
  constexpr int kWidest = static_cast<int>(kDirectHaloMaxUnsplitBytes / sizeof(T));
  if (split == 1 && buffers == 2) {
    switch (problem.input[1]) {
      case 32: return DispatchTile<T, 32, 1, 2>(problem, b, rows, channels, stream);
      case 64: return DispatchTile<T, 64, 1, 2>(problem, b, rows, channels, stream);
      case 128:
        if constexpr (kWidest >= 128) {
          return DispatchTile<T, 128, 1, 2>(problem, b, rows, channels, stream);
        }
        break;
    }
  } else if (split > 1) {
    switch (problem.input[1]) {
      case 128:
        if constexpr (kWidest < 128) {
          return DispatchSplit<T, 128>(problem, b, rows, channels, buffers, stream);
        }
        break;
      case 256: return DispatchSplit<T, 256>(problem, b, rows, channels, buffers, stream);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the halo GEMM is built for 32 to ", kWidest, " input channels of ", sizeof(T),
      " bytes with two halo buffers, or up to 256 with the taps split"));
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
  const int64_t split = std::max<int64_t>(1, DirectKnob(id, kDirectKnobTapSplit));
  int64_t halo_buffers = DirectKnob(id, kDirectKnobHaloBuffers);
  if (halo_buffers == 0) halo_buffers = 2;  // knob 9 left out
  if (channels <= 0 || problem.output[1] % channels != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), " does not divide the layer's ", problem.output[1],
                     " output channels"));
  }
  if (halo_buffers != 1 && halo_buffers != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), ": the halo GEMM has 1 or 2 halo buffers"));
  }
  if (split != 1 && split != kDirectHaloSplit) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), ": the halo GEMM splits taps ", kDirectHaloSplit,
                     " ways or not at all"));
  }
  if (split > 1 && CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 <
                       kDirectGemmComputeCapability) {
    return absl::FailedPreconditionError(
        "the direct halo GEMM's split taps need thread-block clusters (compute capability 9.0)");
  }
  switch (problem.dtype) {
    case DType::kFloat16:
      return pair_kernel::DispatchChannels<__half>(problem, buffers, rows, channels, split,
                                                   halo_buffers, stream);
    case DType::kBFloat16:
      return pair_kernel::DispatchChannels<__nv_bfloat16>(problem, buffers, rows, channels,
                                                          split, halo_buffers, stream);
    case DType::kFloat32:
      return pair_kernel::DispatchChannels<float>(problem, buffers, rows, channels, split,
                                                  halo_buffers, stream);
  }
  return absl::InvalidArgumentError("the direct halo GEMM: unknown dtype");
}

}  // namespace convserve
