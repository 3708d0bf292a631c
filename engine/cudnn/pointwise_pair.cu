// The pointwise pair kernel. Each block keeps both weight matrices and both
// biases in shared memory for its life and loops over 128-pixel tiles,
// copying the next tile's input in (cp.async) while it computes this one.
// Each of its 8 warps owns 16 pixel rows of the tile. For each 32-channel
// chunk of C1, the first conv (float32 accumulation) gives accumulators
// that, plus bias, activated in float32 and rounded to the dtype, are laid
// out exactly as the A operand of the second conv's MMAs, so the chunk goes
// from registers to the second conv's float32 accumulators without touching
// memory. A plain (or clipped) ReLU runs on the rounded pairs (packed
// min/max) in a copy of the loop of its own; other activations are switched
// on once per chunk, not per element (per element, the kernel was six times
// slower on an H100: the switch out-issued the MMAs). When the output rows
// are no wider than the input rows (C2 <= C0), a warp stages its output in
// its own input rows' shared memory and stores whole 128-byte lines.
//
// The MMAs: compiled for sm_90a (H100, H200), each group of 4 warps is a
// warpgroup that runs both convs as wgmma with A from registers (its input
// fragments, then the chunk's rounded activations) and the weights read
// from shared memory by the tensor cores (wgmma.cuh); elsewhere (sm_80 and
// the compute_90 PTX newer GPUs JIT) each warp runs mma.sync m16n8k16 with
// B fragments loaded by ldmatrix. On an H200 the pair (64->256->64 @ 56,
// N=32) took 20.7 us with wgmma against 29.2 with mma.sync, in the
// device pool's race, and the ResNet-50 stack at batch 32 162.0 us against
// 178.6 (docs/cudnn.md, "Fused 1x1 pairs"): mma.sync issued 9 million
// instructions a call, with B fragments reloaded by every warp.
//
// 8 warps of 16 rows, not 4 of 32: at 190 registers a thread (mma.sync),
// 4-warp blocks left 8 warps on an SM, and ncu (H200) found no eligible
// warp 65% of the time; 16-row warps need at most 128 registers (120-127
// with wgmma, 96-122 with mma.sync), so two blocks hold 16 warps an SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/activation.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/device_dtype.cuh"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/pointwise_pair.h"
#include "engine/cudnn/pointwise_pair_convs.cuh"
#include "engine/cudnn/pointwise_pair_kernel.h"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace pair_kernel {

// The second conv's epilogue for the warp's rows: plus bias, activated and
// rounded (`pack`), into rows of `pitch` elements from `out` (rows
// from `valid_rows` on, past the last pixel, are not written).
template <typename T, int kC2, typename Packer>
__device__ inline void OutputRows(const float (&acc)[kM][kC2 / 8][4], const float* bias,
                                  const Packer& pack, T* out, int pitch, int64_t valid_rows,
                                  int g, int t) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int n = 0; n < kC2 / 8; ++n) {
      const int column = n * 8 + 2 * t;
      const int row = m * 16 + g;
      const float b0 = bias[column], b1 = bias[column + 1];
      if (row < valid_rows) {
        *reinterpret_cast<unsigned*>(out + row * pitch + column) =
            pack(acc[m][n][0] + b0, acc[m][n][1] + b1);
      }
      if (row + 8 < valid_rows) {
        *reinterpret_cast<unsigned*>(out + (row + 8) * pitch + column) =
            pack(acc[m][n][2] + b0, acc[m][n][3] + b1);
      }
    }
  }
}

// OutputRows for any activation (WithKind picks K once per tile).
template <typename T, int kC2>
struct OutputEpilogue {
  const float (&acc)[kM][kC2 / 8][4];
  const float* bias;  // shared memory, C2 floats
  const Activation& activation;
  T* out;
  int pitch;
  int64_t valid_rows;
  int g, t;

  template <ActivationKind K>
  __device__ void Run() const {
    OutputRows<T, kC2>(acc, bias, PackActivated<T, KindActivation<K>>{{activation}}, out, pitch,
                       valid_rows, g, t);
  }
};

// kC0, kC2: 32 or 64 (each further count costs compile time; the wgmma
// path needs multiples of 32, and a wgmma instruction of N = kC2); c1 a
// multiple of 32. Y has c2 channels, a multiple of kC2: each block computes
// one slice of kC2 of them (block b slice b % (c2 / kC2), the second
// conv's weights and bias from that row on) for tiles b / (c2 / kC2), then
// every gridDim.x / (c2 / kC2) on; the grid is a multiple of the slices.
// Shared memory as PointwisePairSharedBytes counts it for a second conv of
// kC2 outputs: w0 [C1][C0 + pad], w1 [kC2][C1 + pad], two input tiles
// [128][C0 + pad], then the biases in float. On the wgmma path each weight
// matrix sits swizzled (SwizzledWeight) at the start of its region, without
// the padding.
template <typename T, int kC0, int kC2>
__global__ void __launch_bounds__(kThreads, 2)
    PointwisePairKernel(const T* __restrict__ x, const T* __restrict__ w0,
                        const T* __restrict__ bias0, Activation activation0,
                        const T* __restrict__ w1, const T* __restrict__ bias1,
                        Activation activation1, T* __restrict__ y, int64_t pixels, int c1,
                        int c2) {
  const int slices = c2 / kC2, slice = static_cast<int>(blockIdx.x % slices);
  w1 += static_cast<int64_t>(slice) * kC2 * c1;
  if (bias1 != nullptr) bias1 += slice * kC2;
  y += slice * kC2;
  constexpr int kRow0 = kC0 + kPad, kSteps0 = kC0 / 16, kBlocks2 = kC2 / 8;
  const int row1 = c1 + kPad;
  const bool relu0 =
      activation0.kind == ActivationKind::kRelu && activation0.negative_slope == 0.f;
  const float clip0 = activation0.has_upper_clip ? activation0.upper_clip : INFINITY;
  const bool relu1 =
      activation1.kind == ActivationKind::kRelu && activation1.negative_slope == 0.f;
  const float clip1 = activation1.has_upper_clip ? activation1.upper_clip : INFINITY;
  // 1024: the weights (first) start on the 512-byte boundary wgmma's
  // swizzle repeats at; both matrices' padded sizes are multiples of 512.
  extern __shared__ __align__(1024) unsigned char shared[];
  T* const shared_w0 = reinterpret_cast<T*>(shared);
  T* const shared_w1 = shared_w0 + c1 * kRow0;
  T* const shared_x = shared_w1 + kC2 * row1;
  float* const shared_bias0 = reinterpret_cast<float*>(shared_x + 2 * kTile * kRow0);
  float* const shared_bias1 = shared_bias0 + c1;
  const int thread = threadIdx.x, lane = thread & 31, warp = thread >> 5;
  const int64_t tiles = (pixels + kTile - 1) / kTile, tile_step = gridDim.x / slices;
  const auto load_tile = [&](int64_t tile, int buffer) {
    CopyInputTile<T, kC0>(shared_x, buffer, x, tile, pixels, thread);
  };
  CopyFirstWeights<T, kC0>(shared_w0, w0, c1, thread);
  const int vectors1 = c1 / 8;
  for (int v = thread; v < kC2 * vectors1; v += kThreads) {
    const int r = v / vectors1, c = (v % vectors1) * 8;
    CopyAsync16(shared_w1 + (kWarpgroupPair ? SwizzledWeight(kC2, r, c) : r * row1 + c),
                w1 + r * c1 + c, true);
  }
  CopyBias(shared_bias0, bias0, c1, thread);
  CopyBias(shared_bias1, bias1, kC2, thread);
  // The weights and biases (no kernel writes them) are on their way before
  // the wait; the input is not read before it (dependent_launch.h).
  AwaitPreviousKernel();
  int64_t tile = blockIdx.x / slices;
  if (tile < tiles) load_tile(tile, 0);
  AwaitFirstCopies();

  // Fragment coordinates: C and A rows g (and g + 8), columns 2t; the rows
  // and columns whose addresses this lane gives ldmatrix for A and for B.
  const int g = lane >> 2, t = lane & 3;
  const int a_row = lane & 15, a_column = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_column = ((lane >> 3) & 1) * 8;
  for (int buffer = 0; tile < tiles; tile += tile_step, buffer ^= 1) {
    const int64_t next = tile + tile_step;
    if (next < tiles) load_tile(next, buffer ^ 1);
    CopyAsyncCommit();
    T* const tile_x = shared_x + (buffer * kTile + warp * kRowsPerWarp) * kRow0;
    unsigned x_fragments[kM][kSteps0][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int k = 0; k < kSteps0; ++k) {
        LdMatrixX4(x_fragments[m][k], tile_x + (m * 16 + a_row) * kRow0 + k * 16 + a_column);
      }
    }
    if (next >= tiles) ReleaseDependents();  // the block's last tile
    float acc1[kM][kBlocks2][4] = {};
    // A plain ReLU gets its own copy of the loop, without the switch.
    if (relu0) {
      TileConvs<T, kC0, kC2>(
          x_fragments, shared_w0, shared_w1, c1, b_row, b_column,
          [&](const float(&acc0)[kM][4][4], unsigned(&a)[kM][2][4], int chunk) {
            HiddenChunk(acc0, shared_bias0, chunk, t, PackRelu<T>{Pack<T>(clip0, clip0)}, a);
          },
          acc1);
    } else {
      TileConvs<T, kC0, kC2>(
          x_fragments, shared_w0, shared_w1, c1, b_row, b_column,
          [&](const float(&acc0)[kM][4][4], unsigned(&a)[kM][2][4], int chunk) {
            WithKind(activation0, HiddenEpilogue<T>{acc0, a, shared_bias0, activation0, chunk, t});
          },
          acc1);
    }
    const int64_t first_row = tile * kTile + warp * kRowsPerWarp;
    const int64_t valid_rows = pixels - first_row;
    // With C2 <= C0 the output rows fit where the warp's own input rows
    // were (read into x_fragments above; no other warp reads them), so the
    // epilogue stages them there and the warp stores whole lines.
    constexpr bool kStaged = kC2 <= kC0;
    T* const out = kStaged ? tile_x : y + first_row * c2;
    const int pitch = kStaged ? kRow0 : c2;
    if constexpr (kStaged) __syncwarp();  // the warp's ldmatrix reads of them are done
    if (relu1) {
      OutputRows<T, kC2>(acc1, shared_bias1, PackRelu<T>{Pack<T>(clip1, clip1)}, out, pitch,
                         valid_rows, g, t);
    } else {
      WithKind(activation1, OutputEpilogue<T, kC2>{acc1, shared_bias1, activation1, out, pitch,
                                                   valid_rows, g, t});
    }
    if constexpr (kStaged) {
      __syncwarp();
      StoreStagedRows<T, kC2>(tile_x, kRow0, y + first_row * c2, c2, valid_rows, lane);
    }
    CopyAsyncWait<0>();
    __syncthreads();
  }
}

struct PairLaunch {
  const ConvLayerProblem& first;
  const ConvLayerProblem& second;
  const PointwisePairBuffers& buffers;
  // blocks 0: only set the shared memory limit and count resident blocks.
  PointwisePairGrid grid;
  cudaStream_t stream;
  int* resident;  // set when grid.blocks == 0
};

// `second` with only `channels` of its outputs: what one slice computes.
ConvLayerProblem OutputSlice(const ConvLayerProblem& second, int64_t channels) {
  ConvLayerProblem slice = second;
  slice.output[1] = slice.weights[0] = channels;
  return slice;
}

template <typename T, int kC0, int kC2>
absl::Status LaunchTyped(const PairLaunch& launch) {
  const auto kernel = PointwisePairKernel<T, kC0, kC2>;
  const int64_t shared_bytes =
      PointwisePairSharedBytes(launch.first, OutputSlice(launch.second, kC2));
  // Over the default 48 KiB: opted into once (PrepareKernel).
  ASSIGN_OR_RETURN(const int resident, PrepareKernel(reinterpret_cast<const void*>(kernel),
                                                     kThreads, static_cast<int>(shared_bytes)));
  if (launch.grid.blocks == 0) {
    *launch.resident = resident;
    return absl::OkStatus();
  }
  const PointwisePairBuffers& b = launch.buffers;
  const Shape& x = launch.first.input;
  CUDA_RETURN_IF_ERROR(LaunchDependent(
      kernel, dim3(launch.grid.blocks), dim3(kThreads),
      static_cast<size_t>(SpreadSharedBytes(
          static_cast<int>(shared_bytes), launch.grid.blocks,
          PointwiseTiles(x[0] * x[2] * x[3]) * launch.grid.slices)),
      launch.stream, static_cast<const T*>(b.x), static_cast<const T*>(b.w0),
      launch.first.has_bias ? static_cast<const T*>(b.bias0) : nullptr,
      launch.first.activation, static_cast<const T*>(b.w1),
      launch.second.has_bias ? static_cast<const T*>(b.bias1) : nullptr,
      launch.second.activation, static_cast<T*>(b.y), x[0] * x[2] * x[3],
      static_cast<int>(launch.first.output[1]), static_cast<int>(launch.second.output[1])));
  return absl::OkStatus();
}

template <typename T, int kC0>
absl::Status DispatchC2(const PairLaunch& launch) {
  switch (launch.second.output[1] / launch.grid.slices) {
    case 32: return LaunchTyped<T, kC0, 32>(launch);
    case 64: return LaunchTyped<T, kC0, 64>(launch);
  }
  return absl::InvalidArgumentError("the pair kernel is built for 32 or 64 outputs");
}

template <typename T>
absl::Status DispatchC0(const PairLaunch& launch) {
  switch (launch.first.input[1]) {
    case 32: return DispatchC2<T, 32>(launch);
    case 64: return DispatchC2<T, 64>(launch);
  }
  return absl::InvalidArgumentError("the pair kernel is built for 32 or 64 inputs");
}

absl::Status Dispatch(const PairLaunch& launch) {
  switch (launch.first.dtype) {
    case DType::kFloat16: return DispatchC0<__half>(launch);
    case DType::kBFloat16: return DispatchC0<__nv_bfloat16>(launch);
    case DType::kFloat32: break;
  }
  return absl::InvalidArgumentError("the pair kernel runs float16 and bfloat16 only");
}

}  // namespace pair_kernel

absl::StatusOr<int64_t> PointwisePairSharedLimit() {
  int device = 0, limit = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return limit;
}

absl::StatusOr<std::vector<PointwisePairGrid>> PointwisePairGrids(
    const ConvLayerProblem& first, const ConvLayerProblem& second) {
  int device = 0, sms = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const Shape& x = first.input;
  const int64_t pixels = x[0] * x[2] * x[3];
  const int64_t tiles = PointwiseTiles(pixels);
  const int64_t c2 = second.output[1];
  std::vector<PointwisePairGrid> grids;
  for (const int slices : {1, 2}) {
    if (c2 % slices != 0 || !PointwiseKernelBuiltFor(c2 / slices)) break;
    const PointwisePairBuffers none;
    int resident = 0;
    const absl::Status fits =
        pair_kernel::Dispatch({first, second, none, {0, slices}, nullptr, &resident});
    if (!fits.ok()) {
      if (slices == 1) return fits;
      break;
    }
    const int64_t most = int64_t{resident} * sms;
    // Slices only where the tiles leave half the resident blocks idle.
    if (slices > 1 && slices * tiles > most) break;
    grids.push_back({static_cast<int>(PointwiseTileBlocks(pixels, slices, most)), slices});
  }
  return grids;
}

absl::Status LaunchPointwisePair(const ConvLayerProblem& first, const ConvLayerProblem& second,
                                 const PointwisePairBuffers& buffers,
                                 const PointwisePairGrid& grid, cudaStream_t stream) {
  for (const void* pointer : {buffers.x, buffers.w0, buffers.w1,
                              static_cast<const void*>(buffers.y)}) {
    if (pointer == nullptr || reinterpret_cast<uintptr_t>(pointer) % 16 != 0) {
      return absl::InvalidArgumentError("a tensor of the pair is missing or not 16-byte aligned");
    }
  }
  if ((first.has_bias && buffers.bias0 == nullptr) ||
      (second.has_bias && buffers.bias1 == nullptr)) {
    return absl::InvalidArgumentError("a bias of the pair has no buffer");
  }
  if (grid.blocks <= 0 || grid.slices <= 0 || grid.blocks % grid.slices != 0 ||
      second.output[1] % grid.slices != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the pair cannot launch ", grid.blocks,
                                                   " blocks in ", grid.slices, " slices"));
  }
  const Shape& x = first.input;
  if (x[0] * x[2] * x[3] == 0) return absl::OkStatus();
  return pair_kernel::Dispatch({first, second, buffers, grid, stream, nullptr});
}

}  // namespace convserve
