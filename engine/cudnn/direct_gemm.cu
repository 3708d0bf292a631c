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
// hardware's 64-byte swizzle. float layers, and the compute_90 PTX newer
// GPUs JIT, have each warp load fragments with ldmatrix and run mma.sync
// m16n8k16 (m16n8k8 TF32), 8 or 16 of them a step (tensor_core.cuh, Mma).
// wgmma cut the kernel's instructions by only 1-5% on batch-1 1x1 layers
// (ncu): most were outside the multiply, in the setup's divisions by layer
// sizes (now FastDivisor, GemmDims), the copies' address arithmetic and the
// epilogue's sums.
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
// tile's rows: every block sends it its sums of those rows
// (cluster_mailbox.cuh), and it adds them, applies bias and activation,
// rounds once and writes Y.
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
#include "engine/cudnn/tensor_core.cuh"
#include "engine/cudnn/wgmma.cuh"
#include "engine/status_macros.h"

namespace convserve {
namespace {

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

// Whether a group multiplies with wgmma (sm_90a code, 16-bit types) or
// mma.sync. float stays on mma.sync: wgmma's TF32 drops a float's low 13
// bits, and rounding the stage in shared memory first made float32 layers
// 0.1-0.5 us slower on an H100 than mma.sync with rounded fragments.
template <typename T>
constexpr bool kWarpgroupMma = CONVSERVE_WGMMA && !std::is_same_v<T, float>;

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

template <typename T, int kTileChannels>
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
  // The tile's rows each block owns: 1 << row_shift.
  const int row_shift = kTileShift - split_shift, rows = 1 << row_shift;
  float* const mailbox = reinterpret_cast<float*>(shared + StageBytes<T, kTileChannels>());
  uint64_t* const mail_barrier = reinterpret_cast<uint64_t*>(mailbox + kTileFloats);
  if (splits > 1) {
    if (threadIdx.x == 0) {
      InitMailbox(mail_barrier,
                  static_cast<unsigned>((kTileFloats - kTileFloats / splits) * sizeof(float)));
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

  // ldmatrix offsets of this thread's rows, the same in every step (for
  // mma.sync; unused, and dropped by the compiler, with wgmma).
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
    if constexpr (kWarpgroupMma<T>) FenceProxyAsyncShared();
    // Stage i is in and every warp is done with stage i - 1's slot: a
    // group's rows of a slot are copied and read by its own warps only, so
    // the groups wait for their own copies, not for each other's.
    GroupBarrier(1 + group, kGroupThreads);
    if (i + kStages - 1 < stage_count) load((i + kStages - 1) % kStages, true);
    CopyAsyncCommit();
    if (!has_step) continue;
    if constexpr (kWarpgroupMma<T>) {
      // The group is one warpgroup: its 64 pixel rows by kTileChannels in
      // one wgmma per 32 bytes of the step, waited for before the barrier
      // that lets the slot be copied over.
      const uint64_t a = WgmmaDescriptor64B(step_base);
      const uint64_t b = WgmmaDescriptor64B(step_base + kTilePixels * kChunk<T>);
      WgmmaFence();
#pragma unroll
      for (int step = 0; step < kMmaSteps; ++step) {
        Wgmma<T, kTileChannels>(acc, a + 2 * step, b + 2 * step);
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
    const int g = lane >> 2, t = lane & 3;
    float* mine = partial + group * kPartialFloats<kTileChannels>;
#pragma unroll
    for (int f = 0; f < kTileChannels / 8; ++f) {
      const int offset = (warp * 16 + g) * kPartialStride<kTileChannels> + 8 * f + 2 * t;
      *reinterpret_cast<float2*>(mine + offset) = make_float2(acc[f][0], acc[f][1]);
      *reinterpret_cast<float2*>(mine + offset + 8 * kPartialStride<kTileChannels>) =
          make_float2(acc[f][2], acc[f][3]);
    }
  }
  __syncthreads();
  if (splits == 1) {
    WithKind(activation, TileOutput<T, kTileChannels>{partial, y, bias, activation, d, pixel0,
                                                      channel0, 0, kTilePixels, 1});
    return;
  }
  // The groups' sums, each row's to the mailbox of the block that owns it,
  // at this block's place there (padding columns too: whole rows, as the
  // mailbox counts them).
  static_assert(kTileFloats % 4 == 0, "float4 sums");
  AwaitPeerMailboxes();
  const int owned = rows * kPartialStride<kTileChannels>;  // floats
  for (int e = 4 * threadIdx.x; e < kTileFloats; e += 4 * kThreads) {
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

template <typename T, int kTileChannels>
absl::Status Launch(const ConvLayerProblem& problem, const ConvLayerBuffers& b, int splits,
                    cudaStream_t stream) {
  const GemmDims d = DimsOf(problem);
  const auto kernel = ImplicitGemm<T, kTileChannels>;
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
                                          static_cast<const T*>(b.w),
                                          static_cast<const T*>(b.bias), static_cast<T*>(b.y), d,
                                          problem.activation));
  return absl::OkStatus();
}

template <typename T>
absl::Status DispatchTile(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                          int64_t tile_channels, int splits, cudaStream_t stream) {
  if (tile_channels == 64) return Launch<T, 64>(problem, b, splits, stream);
  return Launch<T, 32>(problem, b, splits, stream);
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
      return DispatchTile<float>(problem, buffers, tile_channels, static_cast<int>(splits),
                                 stream);
  }
  return absl::InvalidArgumentError("the direct implicit GEMM: unknown dtype");
}

}  // namespace convserve
