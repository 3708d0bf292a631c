// The direct path's implicit GEMM (engine 1 of engine/cudnn/direct_conv.h).
//
// The conv as a GEMM: rows are output pixels (N*P*Q), columns output
// channels (K), the reduction runs over R*S*C in steps of one tap's 64
// bytes of channels (32 float16 or bfloat16, 16 float32), so a step's input
// is 64 contiguous bytes of a pixel (or zeros where the tap falls in the
// padding) and its weights 64 contiguous bytes of a channel's KRSC row. A
// block computes 64 pixels by kTileChannels channels with tensor cores
// (float32 accumulation; float32 multiplies in TF32). The dtypes share
// everything but the MMA: their steps have the same bytes and swizzle.
//
// Compiled for sm_90a (H100, H200), a group of 4 warps of a 16-bit layer is
// a warpgroup and multiplies a step with two wgmma instructions that read
// it from shared memory (wgmma.cuh): the step's layout is already the
// hardware's 64-byte swizzle. A float layer does so too where it has its
// weights rounded to TF32 (ConvLayerBuffers::w_tf32), with A from
// registers, loaded with ldmatrix and rounded there. Other float layers,
// and the compute_90 PTX newer GPUs JIT, have each warp load fragments with
// ldmatrix and run mma.sync m16n8k16 (m16n8k8 TF32), 8 or 16 of them a step
// (tensor_core.cuh, Mma). docs/cudnn.md has what wgmma won and cost.
//
// The layers this engine is for have few output tiles and long reductions,
// and with one warp per scheduler a block issued an instruction every 5
// cycles (ncu): each step waited on its own address arithmetic and
// ldmatrix/mma latencies. So a block has kGroups groups of 4 warps, each
// warp 16 pixel rows; a pipeline stage holds kGroups consecutive steps, one
// per group, and kStages stages are in flight through cp.async. The groups
// add their sums in shared memory at the end.
//
// A cluster of `splits` blocks (grid z) shares one output tile, each block
// taking a contiguous part of the reduction. Block z owns 64/splits of the
// tile's rows: every block sends it its sums of those rows that hold a
// pixel (cluster_mailbox.cuh), and it adds them, applies bias and
// activation, rounds once and writes Y.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cluster_mailbox.cuh"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/fast_divisor.h"
#include "engine/cudnn/gemm_tile.cuh"
#include "engine/cudnn/tensor_core.cuh"
#include "engine/cudnn/wgmma.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace {

using gemm::GemmDims;
using gemm::kChunk;
using gemm::kGroups;
using gemm::kGroupThreads;
using gemm::kMmaSteps;
using gemm::kPartialFloats;
using gemm::kPartialStride;
using gemm::kSegmentElements;
using gemm::kSegments;
using gemm::kStages;
using gemm::kStepElements;
using gemm::kThreads;
using gemm::kTilePixels;
using gemm::kTileShift;
using gemm::kWarpgroupMma;
using gemm::SharedBytes;
using gemm::StageBytes;
using gemm::Swizzled;
using gemm::TileOutput;

template <typename T, int kTileChannels, bool kTf32Weights>
__global__ void __launch_bounds__(kThreads)
    ImplicitGemm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                 T* __restrict__ y, GemmDims d, Activation activation) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // 1024: each step's tiles start on the 512-byte boundary wgmma's swizzle
  // repeats at.
  extern __shared__ __align__(1024) unsigned char shared[];
  T* stages = reinterpret_cast<T*>(shared);
  const int group = threadIdx.x / kGroupThreads;
  const int tid = threadIdx.x % kGroupThreads;  // within the group
  const int lane = tid & 31, warp = tid >> 5;
  const int pixel0 = blockIdx.x * kTilePixels;
  const int channel0 = blockIdx.y * kTileChannels;
  // splits is 1, 2, 4 or 8 (LaunchDirectGemm): shifts, not divisions.
  const int splits = gridDim.z, split = blockIdx.z, split_shift = __ffs(splits) - 1;
  const int chunk_begin = static_cast<int>((int64_t{d.chunks} * split) >> split_shift);
  const int chunk_end = static_cast<int>((int64_t{d.chunks} * (split + 1)) >> split_shift);
  const int stage_count = (chunk_end - chunk_begin + kGroups - 1) / kGroups;
  constexpr int kTileFloats = kPartialFloats<kTileChannels>;
  // The tile's rows each block owns: 1 << row_shift. Rows past the layer's
  // last pixel (`valid` on) are neither summed nor sent.
  const int row_shift = kTileShift - split_shift, rows = 1 << row_shift;
  const int valid = min(kTilePixels, d.pixels - pixel0);
  const int owned_valid = min(rows, max(0, valid - split * rows));
  float* const mailbox = reinterpret_cast<float*>(shared + StageBytes<T, kTileChannels>());
  uint64_t* const mail_barrier = reinterpret_cast<uint64_t*>(mailbox + kTileFloats);
  if (splits > 1) {
    if (threadIdx.x == 0) {
      InitMailbox(mail_barrier, static_cast<unsigned>((splits - 1) * owned_valid *
                                                      kPartialStride<kTileChannels> *
                                                      sizeof(float)));
    }
    AnnounceMailboxes();
  }

  // The rows this thread copies for its group, each at segment `segment`:
  // input pixels (their image's first row, and the top-left input position
  // of their window) and output channels' weights.
  const int segment = tid % kSegments;
  constexpr int kRowStep = kGroupThreads / kSegments;
  constexpr int kInputRows = kTilePixels / kRowStep;
  constexpr int kWeightRows = kTileChannels / kRowStep;
  static_assert(kWeightRows >= 1, "every thread copies weights");
  int image_row[kInputRows], top[kInputRows], left[kInputRows];
  bool pixel_valid[kInputRows];
#pragma unroll
  for (int i = 0; i < kInputRows; ++i) {
    const int pixel = pixel0 + tid / kSegments + i * kRowStep;
    pixel_valid[i] = pixel < d.pixels;
    const int n = d.per_image.Divide(pixel), within = d.per_image.Remainder(pixel, n);
    const int p = d.by_q.Divide(within), q = d.by_q.Remainder(within, p);
    image_row[i] = n * d.h;
    top[i] = p * d.stride_h - d.pad_h;
    left[i] = q * d.stride_w - d.pad_w;
  }
  const T* weight_row[kWeightRows];
  bool channel_valid[kWeightRows];
#pragma unroll
  for (int i = 0; i < kWeightRows; ++i) {
    const int channel = channel0 + tid / kSegments + i * kRowStep;
    channel_valid[i] = channel < d.k;
    weight_row[i] =
        w + (channel_valid[i] ? channel : 0) * d.reduction + segment * kSegmentElements<T>;
  }

  // The group's next step to copy (kGroups steps after its last), as the
  // tap (r, s) and first channel c0 it covers: advanced without division.
  int next_chunk = chunk_begin + group;
  int tap = d.by_c.Divide(next_chunk * kChunk<T>);
  int c0 = d.by_c.Remainder(next_chunk * kChunk<T>, tap);
  int tap_r = d.by_s.Divide(tap), tap_s = d.by_s.Remainder(tap, tap_r);
  // The weights of step `chunk` (the group's) into stage slot `slot`.
  const auto load_weights = [&](int slot, int chunk) {
    T* b = stages + (slot * kGroups + group) * kStepElements<T, kTileChannels> +
           kTilePixels * kChunk<T>;
#pragma unroll
    for (int i = 0; i < kWeightRows; ++i) {
      CopyAsync16(b + Swizzled<T>(tid / kSegments + i * kRowStep, segment),
                  weight_row[i] + chunk * kChunk<T>, channel_valid[i]);
    }
  };
  // The group's next step into `slot`: its input and, unless copied
  // already, its weights.
  const auto load = [&](int slot, bool weights) {
    if (next_chunk < chunk_end) {
      T* a = stages + (slot * kGroups + group) * kStepElements<T, kTileChannels>;
#pragma unroll
      for (int i = 0; i < kInputRows; ++i) {
        const int h = top[i] + tap_r * d.dilation_h, col = left[i] + tap_s * d.dilation_w;
        const bool inside = pixel_valid[i] &&
                            static_cast<unsigned>(h) < static_cast<unsigned>(d.h) &&
                            static_cast<unsigned>(col) < static_cast<unsigned>(d.w);
        const T* source =
            inside ? x + ((image_row[i] + h) * d.w + col) * d.c + c0 +
                         segment * kSegmentElements<T>
                   : x;
        CopyAsync16(a + Swizzled<T>(tid / kSegments + i * kRowStep, segment), source, inside);
      }
      if (weights) load_weights(slot, next_chunk);
    }
    next_chunk += kGroups;
    c0 += kGroups * kChunk<T>;
    while (c0 >= d.c) {
      c0 -= d.c;
      if (++tap_s == d.s) {
        tap_s = 0;
        ++tap_r;
      }
    }
  };

  constexpr bool kWgmma = kWarpgroupMma<T, kTf32Weights>;
  constexpr bool kFloat = std::is_same_v<T, float>;
  // ldmatrix offsets of this thread's rows, the same in every step (for
  // mma.sync, and float's A with wgmma; otherwise dropped by the compiler).
  int a_offset[kMmaSteps], b_offset[kTileChannels / 16][kMmaSteps];
#pragma unroll
  for (int step = 0; step < kMmaSteps; ++step) {
    a_offset[step] = Swizzled<T>(warp * 16 + (lane & 15), 2 * step + (lane >> 4));
#pragma unroll
    for (int f = 0; f < kTileChannels / 16; ++f) {
      b_offset[f][step] = kTilePixels * kChunk<T> +
                          Swizzled<T>(16 * f + (lane & 7) + ((lane >> 4) << 3),
                                      2 * step + ((lane >> 3) & 1));
    }
  }

  float acc[kTileChannels / 8][4];
#pragma unroll
  for (int f = 0; f < kTileChannels / 8; ++f) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[f][e] = 0.f;
  }
  // The first stages' weights (no kernel writes them) are on their way
  // before the wait, their input after it (dependent_launch.h): the first
  // commit group holds them all.
#pragma unroll
  for (int slot = 0; slot < kStages - 1; ++slot) {
    const int chunk = chunk_begin + group + slot * kGroups;
    if (slot < stage_count && chunk < chunk_end) load_weights(slot, chunk);
  }
  AwaitPreviousKernel();
#pragma unroll
  for (int slot = 0; slot < kStages - 1; ++slot) {
    if (slot < stage_count) load(slot, false);
    CopyAsyncCommit();
  }
  for (int i = 0; i < stage_count; ++i) {
    CopyAsyncWait<kStages - 2>();
    const bool has_step = chunk_begin + i * kGroups + group < chunk_end;
    const T* const step_base =
        stages + ((i % kStages) * kGroups + group) * kStepElements<T, kTileChannels>;
    // wgmma reads through the async proxy: this thread's copies made
    // visible to it before the barrier.
    if constexpr (kWgmma) FenceProxyAsyncShared();
    // Stage i is in and every warp is done with stage i - 1's slot: a
    // group's rows of a slot are copied and read by its own warps only, so
    // the groups wait for their own copies, not for each other's.
    GroupBarrier(1 + group, kGroupThreads);
    if (i + kStages - 1 < stage_count) load((i + kStages - 1) % kStages, true);
    CopyAsyncCommit();
    if (!has_step) continue;
    if constexpr (kWgmma) {
      // The group is one warpgroup: its 64 pixel rows by kTileChannels in
      // one wgmma per 32 bytes of the step, waited for before the barrier
      // that lets the slot be copied over. float's A is rounded in registers.
      const uint64_t a = WgmmaDescriptor64B(step_base);
      const uint64_t b = WgmmaDescriptor64B(step_base + kTilePixels * kChunk<T>);
      [[maybe_unused]] unsigned a_fragment[kMmaSteps][4];
      if constexpr (kFloat) {
#pragma unroll
        for (int step = 0; step < kMmaSteps; ++step) {
          LdMatrixX4(a_fragment[step], step_base + a_offset[step]);
          RoundToTf32<T>(a_fragment[step]);
        }
      }
      WgmmaFence();
#pragma unroll
      for (int step = 0; step < kMmaSteps; ++step) {
        if constexpr (kFloat) {
          WgmmaRegisterA<T, kTileChannels>(acc, a_fragment[step], b + 2 * step);
        } else {
          Wgmma<T, kTileChannels>(acc, a + 2 * step, b + 2 * step);
        }
      }
      WgmmaCommit();
      WgmmaWait<0>(acc);
    } else {
#pragma unroll
      for (int step = 0; step < kMmaSteps; ++step) {
        unsigned a_fragment[4];
        LdMatrixX4(a_fragment, step_base + a_offset[step]);
        RoundToTf32<T>(a_fragment);
#pragma unroll
        for (int f = 0; f < kTileChannels / 16; ++f) {
          unsigned b_fragment[4];
          LdMatrixX4(b_fragment, step_base + b_offset[f][step]);
          RoundToTf32<T>(b_fragment);
          Mma<T>(acc[2 * f], a_fragment, b_fragment[0], b_fragment[1]);
          Mma<T>(acc[2 * f + 1], a_fragment, b_fragment[2], b_fragment[3]);
        }
      }
    }
  }
  ReleaseDependents();  // the MMAs are issued (dependent_launch.h)
  CopyAsyncWait<0>();
  __syncthreads();  // every warp is done with the stages the partial sums overwrite

  // Thread (g, t) of a warp holds, per n8 block f, pixel rows g and g + 8 at
  // channels 8f + 2t and 8f + 2t + 1.
  float* partial = reinterpret_cast<float*>(shared);
  {
    const int g = lane >> 2, t = lane & 3, row = warp * 16 + g;
    float* mine = partial + group * kPartialFloats<kTileChannels>;
#pragma unroll
    for (int f = 0; f < kTileChannels / 8; ++f) {
      const int offset = row * kPartialStride<kTileChannels> + 8 * f + 2 * t;
      if (row < valid) {
        *reinterpret_cast<float2*>(mine + offset) = make_float2(acc[f][0], acc[f][1]);
      }
      if (row + 8 < valid) {
        *reinterpret_cast<float2*>(mine + offset + 8 * kPartialStride<kTileChannels>) =
            make_float2(acc[f][2], acc[f][3]);
      }
    }
  }
  __syncthreads();
  if (splits == 1) {
    WithKind(activation, TileOutput<T, kTileChannels>{partial, y, bias, activation, d, pixel0,
                                                      channel0, 0, kTilePixels, 1});
    return;
  }
  // The groups' sums of the valid rows, each row's to the mailbox of the
  // block that owns it, at this block's place there (padding columns too:
  // whole rows, as the mailbox counts them).
  static_assert(kTileFloats % 4 == 0, "float4 sums");
  AwaitPeerMailboxes();
  const int owned = rows * kPartialStride<kTileChannels>;  // floats
  for (int e = 4 * threadIdx.x; e < valid * kPartialStride<kTileChannels>; e += 4 * kThreads) {
    float4 sum = *reinterpret_cast<const float4*>(partial + e);
#pragma unroll
    for (int other = 1; other < kGroups; ++other) {
      const float4 part = *reinterpret_cast<const float4*>(partial + other * kTileFloats + e);
      sum.x += part.x;
      sum.y += part.y;
      sum.z += part.z;
      sum.w += part.w;
    }
    const int owner = (e / kPartialStride<kTileChannels>) >> row_shift;
    float* const slot = mailbox + split * owned + (e - owner * owned);
    if (owner == split) {
      *reinterpret_cast<float4*>(slot) = sum;
    } else {
      SendToPeer(sum, slot, mail_barrier, static_cast<unsigned>(owner));
    }
  }
  __syncthreads();  // this block's own rows are in
  AwaitMail(mail_barrier, 0);
  WithKind(activation, TileOutput<T, kTileChannels>{mailbox, y, bias, activation, d, pixel0,
                                                    channel0, split * rows, (split + 1) * rows,
                                                    splits});
#endif
}

GemmDims DimsOf(const ConvLayerProblem& problem) {
  GemmDims d;
  static_cast<DirectConvDims&>(d) = DirectConvDimsOf(problem);
  d.pixels = d.n * d.p * d.q;
  d.reduction = d.r * d.s * d.c;
  d.chunks = d.reduction / static_cast<int>(DirectGemmChunk(problem.dtype));
  d.per_image = FastDivisor::Of(d.p * d.q);
  d.by_q = FastDivisor::Of(d.q);
  d.by_c = FastDivisor::Of(d.c);
  d.by_s = FastDivisor::Of(d.s);
  return d;
}

template <typename T, int kTileChannels, bool kTf32Weights>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b, int splits,
                    cudaStream_t stream) {
  const GemmDims d = DimsOf(problem);
  const auto kernel = ImplicitGemm<T, kTileChannels, kTf32Weights>;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((d.pixels + kTilePixels - 1) / kTilePixels),
                        static_cast<unsigned>((d.k + kTileChannels - 1) / kTileChannels),
                        static_cast<unsigned>(splits));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = SharedBytes<T, kTileChannels>(splits);
  // Over the default 48 KiB: opted into once (PrepareKernel).
  RETURN_IF_ERROR(PrepareKernel(reinterpret_cast<const void*>(kernel), kThreads,
                                static_cast<int>(config.dynamicSmemBytes))
                      .status());
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  SetClusterAndDependentLaunch(static_cast<unsigned>(splits), attrs, &config);
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, static_cast<const T*>(b.x),
                                          static_cast<const T*>(kTf32Weights ? b.w_tf32 : b.w),
                                          static_cast<const T*>(b.bias), static_cast<T*>(b.y), d,
                                          problem.activation));
  return absl::OkStatus();
}

template <typename T, bool kTf32Weights = false>
absl::Status DispatchTile(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                          int64_t tile_channels, int splits, cudaStream_t stream) {
  if (tile_channels == 64) return Launch<T, 64, kTf32Weights>(problem, b, splits, stream);
  return Launch<T, 32, kTf32Weights>(problem, b, splits, stream);
}

}  // namespace

absl::Status LaunchDirectGemm(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream) {
  const int64_t tile_channels = DirectKnob(id, kDirectKnobTileChannels);
  const int64_t splits = DirectKnob(id, kDirectKnobSplits);
  if ((tile_channels != 32 && tile_channels != 64) ||
      (splits != 1 && splits != 2 && splits != 4 && splits != kDirectGemmMaxSplits)) {
    return absl::InvalidArgumentError(
        absl::StrCat(id.ToString(), " is not a configuration of the direct implicit GEMM"));
  }
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 <
      kDirectGemmComputeCapability) {
    return absl::FailedPreconditionError(
        "the direct implicit GEMM needs thread-block clusters (compute capability 9.0)");
  }
  switch (problem.dtype) {
    case DType::kFloat16:
      return DispatchTile<__half>(problem, buffers, tile_channels, static_cast<int>(splits),
                                  stream);
    case DType::kBFloat16:
      return DispatchTile<__nv_bfloat16>(problem, buffers, tile_channels,
                                         static_cast<int>(splits), stream);
    case DType::kFloat32:
      if (buffers.w_tf32 != nullptr) {
        return DispatchTile<float, true>(problem, buffers, tile_channels,
                                         static_cast<int>(splits), stream);
      }
      return DispatchTile<float>(problem, buffers, tile_channels, static_cast<int>(splits),
                                 stream);
  }
  return absl::InvalidArgumentError("the direct implicit GEMM: unknown dtype");
}

}  // namespace convserve
