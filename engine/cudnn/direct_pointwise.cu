// The direct path's pointwise GEMM (engine 3 of engine/cudnn/direct_conv.h):
// one 1x1 conv of 32 or 64 input channels, the pointwise pair kernel's first
// conv on its own. Each block keeps the weights ([K][C], at most
// kDirectPointwiseMaxChannels rows; or a slice of 64 or 128 of the K rows,
// knob 2, for layers of few tiles) and the bias in shared memory for its
// life and loops over 128-pixel tiles, copying the next tile's input in
// (cp.async) while it computes this one. Each of its 8 warps owns 16 pixel
// rows of the tile and reads their A fragments once (ldmatrix); then, for
// each 32-channel chunk of K, the MMAs (wgmma with A from registers on
// sm_90a, mma.sync elsewhere; pointwise_pair_convs.cuh) give float32 sums
// that, plus bias, activated and rounded to the dtype (the pair's epilogue),
// the warp stages in its own input rows (read already) and stores as 64
// contiguous bytes a pixel, 16 bytes a lane. float32 layers multiply in
// TF32 in a kernel of their own (PointwiseGemmTf32, below).
//
// It is for the layers where the pixels are many and the reduction short
// (ResNet-50's 64->64 and 64->256 at 56x56, batch 32): a stream of 64 or
// 128 bytes in and up to 1 KiB out a pixel, where cuDNN's kernels ran at
// 57-69% of the memory-bandwidth floor (docs/cudnn.md, "1x1 streams"), and
// for float32 64->256 at batch 1, where cuDNN's fused kernel took 4.7 us.
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
#include "engine/cudnn/halo_tile.cuh"
#include "engine/cudnn/pointwise_pair_convs.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace pair_kernel {
namespace {

// The chunks of K for the warp's rows (`x`: their A fragments): `emit(acc,
// chunk)` gets each chunk's float32 sums. wgmma: two chunks issued at once,
// the second's MMAs running during the first's epilogue, nothing in flight
// across the loop's back edge (pointwise_pair_convs.cuh, TileConvs).
template <typename T, int kC0, typename Emit>
__device__ inline void Chunks(const unsigned (&x)[kM][kC0 / 16][4], const T* shared_w, int k,
                              int b_row, int b_column, const Emit& emit) {
  if constexpr (kWarpgroupPair) {
    int chunk = 0;
#pragma unroll 1
    for (; chunk + 2 * kChunk <= k; chunk += 2 * kChunk) {
      float acc[2][kM][4][4];
      FirstConvWgmma<T, kC0>(x, shared_w, k, chunk, acc[0]);
      FirstConvWgmma<T, kC0>(x, shared_w, k, chunk + kChunk, acc[1]);
      WgmmaWait<1>(acc[0][0]);
      emit(acc[0], chunk);
      WgmmaWait<0>(acc[1][0]);
      emit(acc[1], chunk + kChunk);
    }
    if (chunk < k) {  // an odd chunk count: the last alone
      float acc[kM][4][4];
      FirstConvWgmma<T, kC0>(x, shared_w, k, chunk, acc);
      WgmmaWait<0>(acc[0]);
      emit(acc, chunk);
    }
  } else {
#pragma unroll 1
    for (int chunk = 0; chunk < k; chunk += kChunk) {
      float acc[kM][4][4] = {};
      FirstConvMma<T, kC0>(x, shared_w, chunk, b_row, b_column, acc);
      emit(acc, chunk);
    }
  }
}

// kC0: 32 or 64; Y has k channels, a multiple of `channels`, which is a
// multiple of 32: each block computes one slice of `channels` of them
// (block b slice b % (k / channels)) for tiles b / (k / channels), then
// every gridDim.x / (k / channels) on; the grid is a multiple of the
// slices. Shared memory as PointwiseSharedBytes counts it: the slice's w
// [channels][C0 + pad] (on the wgmma path swizzled, SwizzledWeight, without
// the padding), two input tiles [128][C0 + pad], its bias in float.
template <typename T, int kC0>
__global__ void __launch_bounds__(kThreads, 2)
    PointwiseGemm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                  Activation activation, T* __restrict__ y, int64_t pixels, int k, int channels) {
  const int slices = k / channels, slice = static_cast<int>(blockIdx.x % slices);
  w += static_cast<int64_t>(slice) * channels * kC0;
  if (bias != nullptr) bias += slice * channels;
  y += slice * channels;
  constexpr int kRow0 = kC0 + kPad, kSteps0 = kC0 / 16;
  const bool relu = activation.kind == ActivationKind::kRelu && activation.negative_slope == 0.f;
  const float clip = activation.has_upper_clip ? activation.upper_clip : INFINITY;
  // 1024: the weights start on the 512-byte boundary wgmma's swizzle repeats
  // at; their padded size is a multiple of 512 (k a multiple of 32).
  extern __shared__ __align__(1024) unsigned char shared[];
  T* const shared_w = reinterpret_cast<T*>(shared);
  T* const shared_x = shared_w + channels * kRow0;
  float* const shared_bias = reinterpret_cast<float*>(shared_x + 2 * kTile * kRow0);
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int64_t tiles = (pixels + kTile - 1) / kTile, tile_step = gridDim.x / slices;
  CopyFirstWeights<T, kC0>(shared_w, w, channels, thread);
  CopyBias(shared_bias, bias, channels, thread);
  // The weights and bias (no kernel writes them) are on their way before
  // the wait; the input is not read before it (dependent_launch.h).
  AwaitPreviousKernel();
  int64_t tile = blockIdx.x / slices;
  if (tile < tiles) CopyInputTile<T, kC0>(shared_x, 0, x, tile, pixels, thread);
  AwaitFirstCopies();

  const int g = lane >> 2, t = lane & 3;
  const int a_row = lane & 15, a_column = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_column = ((lane >> 3) & 1) * 8;
  for (int buffer = 0; tile < tiles; tile += tile_step, buffer ^= 1) {
    const int64_t next = tile + tile_step;
    if (next < tiles) CopyInputTile<T, kC0>(shared_x, buffer ^ 1, x, next, pixels, thread);
    CopyAsyncCommit();
    T* const tile_x = shared_x + (buffer * kTile + warp * kRowsPerWarp) * kRow0;
    unsigned x_fragments[kM][kSteps0][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int s = 0; s < kSteps0; ++s) {
        LdMatrixX4(x_fragments[m][s], tile_x + (m * 16 + a_row) * kRow0 + s * 16 + a_column);
      }
    }
    if (next >= tiles) ReleaseDependents();  // the block's last tile
    // The warp's rows are staged where its input rows were: no other warp
    // reads them, and its own ldmatrix reads are done after this.
    __syncwarp();
    const int64_t first_row = tile * kTile + warp * kRowsPerWarp;
    const int64_t valid_rows = pixels - first_row;
    T* const out = y + first_row * k;
    const auto store = [&](const unsigned(&a)[kM][2][4], int chunk) {
      StageChunk<T>(a, tile_x, kRow0, g, t);
      __syncwarp();
      StoreStagedRows<T, kChunk>(tile_x, kRow0, out + chunk, k, valid_rows, lane);
      __syncwarp();  // read out before the next chunk is staged
    };
    // A plain ReLU gets its own copy of the loop, without the switch.
    if (relu) {
      Chunks<T, kC0>(x_fragments, shared_w, channels, b_row, b_column,
                     [&](const float(&acc)[kM][4][4], int chunk) {
                       unsigned a[kM][2][4];
                       HiddenChunk(acc, shared_bias, chunk, t, PackRelu<T>{Pack<T>(clip, clip)},
                                   a);
                       store(a, chunk);
                     });
    } else {
      Chunks<T, kC0>(x_fragments, shared_w, channels, b_row, b_column,
                     [&](const float(&acc)[kM][4][4], int chunk) {
                       unsigned a[kM][2][4];
                       WithKind(activation,
                                HiddenEpilogue<T>{acc, a, shared_bias, activation, chunk, t});
                       store(a, chunk);
                     });
    }
    CopyAsyncWait<0>();
    __syncthreads();
  }
}

// The float32 (TF32) kernel: PointwiseGemm's tiles and grid, with the
// halo GEMM's single-tap MMAs and epilogue (halo_tile.cuh). The slice's
// weights are kept as channels / 32 chunks of 32 rows, each swizzled as
// SwizzledWeight lays out a tap (the MMAs of both paths read them so),
// rounded to TF32: the caller's rounded copy, or (`round_weights`) the
// block rounds its copy once. A warp loads its 16 rows' A fragments once a
// tile and rounds them; then each chunk is one batch of MMAs, staged in the
// warp's own input rows and stored 128 contiguous bytes a pixel.
template <int kC0>
__global__ void __launch_bounds__(kThreads, 2)
    PointwiseGemmTf32(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ bias, Activation activation,
                      float* __restrict__ y, int64_t pixels, int k, int channels,
                      bool round_weights) {
  constexpr int kRow0 = kC0 + kVector<float>, kSteps0 = kC0 / kMmaChannels<float>;
  constexpr int kVectors0 = kC0 / kVector<float>;
  const int slices = k / channels, slice = static_cast<int>(blockIdx.x % slices);
  w += static_cast<int64_t>(slice) * channels * kC0;
  if (bias != nullptr) bias += slice * channels;
  y += slice * channels;
  // 1024: each chunk's weights (32 x kC0 floats) start on a 512-byte
  // boundary, where wgmma's swizzle repeats.
  extern __shared__ __align__(1024) unsigned char shared[];
  float* const shared_w = reinterpret_cast<float*>(shared);
  float* const shared_x = shared_w + channels * kC0;
  float* const shared_bias = shared_x + 2 * kTile * kRow0;
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int64_t tiles = (pixels + kTile - 1) / kTile, tile_step = gridDim.x / slices;
  for (int v = thread; v < channels * kVectors0; v += kThreads) {
    const int r = v / kVectors0, c = (v % kVectors0) * kVector<float>;
    CopyAsync16(shared_w + (r / kChunk) * kChunk * kC0 + SwizzledWeight<4>(kChunk, r % kChunk, c),
                w + r * kC0 + c, true);
  }
  CopyBias(shared_bias, bias, channels, thread);
  // The weights and bias (no kernel writes them) are on their way before
  // the wait; the input is not read before it (dependent_launch.h).
  AwaitPreviousKernel();
  int64_t tile = blockIdx.x / slices;
  if (tile < tiles) CopyInputTile<float, kC0>(shared_x, 0, x, tile, pixels, thread);
  AwaitFirstCopies();
  if (round_weights) RoundWeightsToTf32(shared_w, channels * kC0, thread, kThreads);
  const uint64_t w_descriptor = kWarpgroupPair ? WgmmaDescriptor64B(shared_w) : 0;

  const int a_row = lane & 15, a_column = (lane >> 4) * kVector<float>;
  const int b_row = (lane & 7) + ((lane >> 4) << 3);
  const int b_column = ((lane >> 3) & 1) * kVector<float>;
  for (int buffer = 0; tile < tiles; tile += tile_step, buffer ^= 1) {
    const int64_t next = tile + tile_step;
    if (next < tiles) CopyInputTile<float, kC0>(shared_x, buffer ^ 1, x, next, pixels, thread);
    CopyAsyncCommit();
    float* const tile_x = shared_x + (buffer * kTile + warp * kRowsPerWarp) * kRow0;
    unsigned a[kSteps0][4];
#pragma unroll
    for (int s = 0; s < kSteps0; ++s) {
      LdMatrixX4(a[s], tile_x + a_row * kRow0 + s * kMmaChannels<float> + a_column);
      RoundToTf32<float>(a[s]);
    }
    if (next >= tiles) ReleaseDependents();  // the block's last tile
    // The warp's rows are staged where its input rows were (read already).
    __syncwarp();
    const int64_t first_row = tile * kTile + warp * kRowsPerWarp;
    const int64_t valid_rows = pixels - first_row;
#pragma unroll 1
    for (int chunk = 0; chunk < channels; chunk += kChunk) {
      // wgmma's first batch sets the sums (d = A B); mma.sync adds to zeros.
      float acc[kChunk / 8][4];
      if constexpr (!kWarpgroupPair) {
#pragma unroll
        for (int f = 0; f < kChunk / 8; ++f) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.f;
      }
      TapMmas<float, kC0, kChunk>(a, shared_w + chunk * kC0,
                                  w_descriptor + chunk * kC0 * 4 / 16, true, b_row, b_column,
                                  acc);
      if constexpr (kWarpgroupPair) WgmmaWait<0>(acc);
      StoreTile<float, kChunk>(acc, shared_bias + chunk, activation, tile_x, kRow0, lane,
                               y + first_row * k + chunk, k, valid_rows);
      __syncwarp();  // read out before the next chunk is staged
    }
    CopyAsyncWait<0>();
    __syncthreads();
  }
}

int64_t PointwiseSharedBytes(const ConvLayerProblem& problem, int64_t channels) {
  return DirectPointwiseSharedBytes(problem.input[1], channels,
                                    static_cast<int64_t>(DTypeSize(problem.dtype)));
}

// Launches a pointwise GEMM kernel of `channels` output channels a block
// over the layer's tiles: its inputs (`w`: the weights it reads), the
// output pixels, K and `channels`, then `extra`.
template <typename T, typename... Extra>
absl::Status LaunchTiles(void (*kernel)(const T*, const T*, const T*, Activation, T*, int64_t, int,
                                        int, Extra...),
                         const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                         const void* w, int64_t blocks_per_sm, int64_t channels,
                         cudaStream_t stream, Extra... extra) {
  const int bytes = static_cast<int>(PointwiseSharedBytes(problem, channels));
  // Over the default 48 KiB: opted into once (PrepareKernel).
  RETURN_IF_ERROR(
      PrepareKernel(reinterpret_cast<const void*>(kernel), kThreads, bytes).status());
  const int64_t pixels = problem.input[0] * problem.input[2] * problem.input[3];
  const int64_t sms = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 1);
  const int64_t slices = problem.output[1] / channels;
  const int64_t tiles = PointwiseTiles(pixels);
  const int64_t blocks = PointwiseTileBlocks(pixels, slices, blocks_per_sm * sms);
  CUDA_RETURN_IF_ERROR(LaunchDependent(
      kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
      static_cast<size_t>(SpreadSharedBytes(bytes, blocks, tiles * slices)), stream,
      static_cast<const T*>(b.x), static_cast<const T*>(w), static_cast<const T*>(b.bias),
      problem.activation, static_cast<T*>(b.y), pixels, static_cast<int>(problem.output[1]),
      static_cast<int>(channels), extra...));
  return absl::OkStatus();
}

template <typename T, int kC0>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                    int64_t blocks_per_sm, int64_t channels, cudaStream_t stream) {
  return LaunchTiles(PointwiseGemm<T, kC0>, problem, b, b.w, blocks_per_sm, channels, stream);
}

// float32: the weights' TF32 copy where the caller has one, else the
// blocks round theirs.
template <int kC0>
absl::Status LaunchTf32(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                        int64_t blocks_per_sm, int64_t channels, cudaStream_t stream) {
  const bool rounded = b.w_tf32 != nullptr;
  return LaunchTiles(PointwiseGemmTf32<kC0>, problem, b, rounded ? b.w_tf32 : b.w, blocks_per_sm,
                     channels, stream, !rounded);
}

template <typename T>
absl::Status DispatchChannels(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                              int64_t blocks_per_sm, int64_t channels, cudaStream_t stream) {
  switch (problem.input[1]) {
    case 32: return Launch<T, 32>(problem, b, blocks_per_sm, channels, stream);
    case 64: return Launch<T, 64>(problem, b, blocks_per_sm, channels, stream);
  }
  return absl::InvalidArgumentError("the pointwise GEMM is built for 32 or 64 input channels");
}

}  // namespace
}  // namespace pair_kernel

absl::Status LaunchDirectPointwise(const ConvLayerProblem& problem, const EngineConfigId& id,
                                   const ConvLayerBuffers& buffers, cudaStream_t stream) {
  const int64_t blocks_per_sm = DirectKnob(id, kDirectKnobBlocksPerSm);
  const int64_t k = problem.output[1];
  // Knob 2 absent: the block computes all K channels.
  const int64_t channels = DirectKnob(id, kDirectKnobTileChannels) > 0
                               ? DirectKnob(id, kDirectKnobTileChannels)
                               : k;
  if ((blocks_per_sm != 1 && blocks_per_sm != 2) || channels % kPointwisePairChunk != 0 ||
      k % channels != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), " is not a configuration of the direct pointwise GEMM"));
  }
  if (std::string why = DirectPointwiseRejection(problem); !why.empty()) {
    return absl::InvalidArgumentError(why);
  }
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 <
      kDirectPointwiseComputeCapability) {
    return absl::FailedPreconditionError(
        "the direct pointwise GEMM needs mma.sync (compute capability 8.0)");
  }
  switch (problem.dtype) {
    case DType::kFloat16:
      return pair_kernel::DispatchChannels<__half>(problem, buffers, blocks_per_sm, channels,
                                                   stream);
    case DType::kBFloat16:
      return pair_kernel::DispatchChannels<__nv_bfloat16>(problem, buffers, blocks_per_sm,
                                                          channels, stream);
    case DType::kFloat32:
      switch (problem.input[1]) {
        case 32: return pair_kernel::LaunchTf32<32>(problem, buffers, blocks_per_sm, channels,
                                                    stream);
        case 64: return pair_kernel::LaunchTf32<64>(problem, buffers, blocks_per_sm, channels,
                                                    stream);
      }
      break;
  }
  return absl::InvalidArgumentError("the pointwise GEMM is built for 32 or 64 input channels");
}

}  // namespace convserve
