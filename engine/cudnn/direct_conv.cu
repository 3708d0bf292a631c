#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/device_dtype.cuh"
#include "engine/cudnn/direct_conv.h"
#include "engine/cudnn/direct_conv_kernel.h"

namespace convserve {
namespace {

constexpr int kThreads = 256;
// Shared memory one block of the channels-last kernel may use for its
// channels' weights and biases (the default limit, no opt-in needed).
constexpr int kSharedBytes = 48 << 10;
// Resident blocks per SM the channels-last grid is sized for; its blocks
// then loop over the column groups, staging their weights once.
constexpr int kBlocksPerSm = 8;


// V consecutive elements moved by one load or store of V * sizeof(T) bytes.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vector {
  T v[V];
};

// The kernel extent the loops run over: kKernel when the kernel is
// specialized for a square size (then they unroll), else the layer's.
template <int kKernel>
__device__ inline int Extent(int runtime) {
  return kKernel > 0 ? kKernel : runtime;
}

// Where local channel `c` of a block sits in a row of block_vectors * V
// floats of shared memory (one tap's weights, or the biases). Vectors of
// more than 4 channels are stored as planes of 4-float quads,
// [quad][vector][4], so the 16-byte loads of consecutive threads are
// consecutive (stored [vector][V] they were 32 bytes apart: bank conflicts).
template <int V>
__device__ inline int ChannelSlot(int c, int block_vectors) {
  if constexpr (V > 4) {
    const int vector = c / V, v = c % V;
    return (v / 4) * block_vectors * 4 + vector * 4 + v % 4;
  } else {
    return c;
  }
}

// out = the V channels of `vector` from a row laid out by ChannelSlot.
template <int V>
__device__ inline void LoadChannels(const float* row, int vector, int block_vectors,
                                    float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const float4 four =
          *reinterpret_cast<const float4*>(row + q * block_vectors * 4 + vector * 4);
      out[4 * q] = four.x;
      out[4 * q + 1] = four.y;
      out[4 * q + 2] = four.z;
      out[4 * q + 3] = four.w;
    }
  } else if constexpr (V == 2) {
    const float2 two = *reinterpret_cast<const float2*>(row + vector * 2);
    out[0] = two.x;
    out[1] = two.y;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = row[vector * V + i];
  }
}

// values = activation(values), the kind chosen once for all of them (inside
// each case the compiler knows the kind, so ApplyActivation's switch folds).
template <int N>
__device__ inline void Activate(const Activation& act, float (&values)[N]) {
  switch (act.kind) {
    case ActivationKind::kIdentity:
      return;
    case ActivationKind::kRelu:
#pragma unroll
      for (int i = 0; i < N; ++i) values[i] = ApplyActivation(act, values[i]);
      return;
    default:
#pragma unroll
      for (int i = 0; i < N; ++i) values[i] = ApplyActivation(act, values[i]);
      return;
  }
}

// kWindow kernels: 3 taps along W with stride and dilation 1 there, so the
// kColumns outputs of a row read kColumns + 2 input columns, each loaded and
// converted once and feeding up to three outputs (instead of 3 * kColumns
// loads). Input column t of the window feeds output j = t - s through tap s.
constexpr int kWindowTaps = 3;

// Channels-last: a thread computes V channels of kColumns consecutive output
// columns of one output row. A block covers `block_vectors` channel vectors
// (all of C when it fits) of several such column groups at a time and loops
// over the column groups; it first copies its channels' weights, transposed
// to [tap][channel slot], and biases into shared memory as float
// (ChannelSlot). Consecutive
// threads take consecutive channel vectors, so every load and store of a
// warp is contiguous.
template <typename T, int V, int kColumns, int kKernel, bool kWindow>
__global__ void DepthwiseChannelsLast(const T* __restrict__ x, const T* __restrict__ w,
                                      const T* __restrict__ bias, T* __restrict__ y,
                                      DirectConvDims d, int block_vectors, int column_groups,
                                      Activation act) {
  extern __shared__ __align__(16) float shared[];
  const int kernel_h = Extent<kKernel>(d.r), kernel_w = Extent<kKernel>(d.s);
  const int taps = kernel_h * kernel_w;
  const int block_channels = block_vectors * V;
  const int c_begin = blockIdx.y * block_channels;
  const int channels_here = min(block_channels, d.c - c_begin);
  float* weights = shared;                         // [taps][block_channels]
  float* biases = shared + taps * block_channels;  // [block_channels]
  for (int i = threadIdx.x; i < taps * channels_here; i += blockDim.x) {
    const int channel = i / taps;
    weights[(i - channel * taps) * block_channels + ChannelSlot<V>(channel, block_vectors)] =
        ToFloat(w[c_begin * taps + i]);
  }
  for (int i = threadIdx.x; i < channels_here; i += blockDim.x) {
    biases[ChannelSlot<V>(i, block_vectors)] = bias != nullptr ? ToFloat(bias[c_begin + i]) : 0.0f;
  }
  // The weights and biases (no kernel writes them) are read before the
  // wait; the input is not (dependent_launch.h).
  AwaitPreviousKernel();
  __syncthreads();

  const int vector = threadIdx.x % block_vectors;
  const int groups_per_block = blockDim.x / block_vectors;
  const int local_group = threadIdx.x / block_vectors;
  const int c0 = c_begin + vector * V;
  if (local_group >= groups_per_block || c0 >= d.c) return;
  const unsigned groups_per_row = (d.q + kColumns - 1) / kColumns;

  float my_bias[V];
  LoadChannels<V>(biases, vector, block_vectors, my_bias);

  for (unsigned group = blockIdx.x * groups_per_block + local_group;
       group < static_cast<unsigned>(column_groups); group += gridDim.x * groups_per_block) {
    const unsigned row = group / groups_per_row;  // n * P + p
    const int q0 = static_cast<int>(group - row * groups_per_row) * kColumns;
    const int n = static_cast<int>(row / static_cast<unsigned>(d.p));
    const int p = static_cast<int>(row) - n * d.p;
    float acc[kColumns][V];
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
#pragma unroll
      for (int v = 0; v < V; ++v) acc[j][v] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kernel_h; ++r) {
      const int h = p * d.stride_h - d.pad_h + r * d.dilation_h;
      if (h < 0 || h >= d.h) continue;
      const T* x_row = x + ((n * d.h + h) * d.w) * d.c + c0;
      if constexpr (kWindow) {
        constexpr int kSpan = kColumns + kWindowTaps - 1;
        Vector<T, V> raw[kSpan];
#pragma unroll
        for (int t = 0; t < kSpan; ++t) {
          const int col = q0 - d.pad_w + t;
          raw[t] = col >= 0 && col < d.w
                       ? *reinterpret_cast<const Vector<T, V>*>(x_row + col * d.c)
                       : Vector<T, V>{};
        }
        float wv[kWindowTaps][V];
#pragma unroll
        for (int s = 0; s < kWindowTaps; ++s) {
          LoadChannels<V>(weights + (r * kWindowTaps + s) * block_channels, vector,
                          block_vectors, wv[s]);
        }
#pragma unroll
        for (int t = 0; t < kSpan; ++t) {
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float in = ToFloat(raw[t].v[v]);
#pragma unroll
            for (int s = 0; s < kWindowTaps; ++s) {
              if (t - s >= 0 && t - s < kColumns) {
                acc[t - s][v] = fmaf(in, wv[s][v], acc[t - s][v]);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int s = 0; s < kernel_w; ++s) {
          float wv[V];
          LoadChannels<V>(weights + (r * kernel_w + s) * block_channels, vector, block_vectors,
                          wv);
#pragma unroll
          for (int j = 0; j < kColumns; ++j) {
            const int col = (q0 + j) * d.stride_w - d.pad_w + s * d.dilation_w;
            if (q0 + j >= d.q || col < 0 || col >= d.w) continue;
            const Vector<T, V> in = *reinterpret_cast<const Vector<T, V>*>(x_row + col * d.c);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[j][v] = fmaf(ToFloat(in.v[v]), wv[v], acc[j][v]);
          }
        }
      }
    }
    T* y_row = y + static_cast<int>(row) * d.q * d.c + c0;
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      if (q0 + j >= d.q) break;
#pragma unroll
      for (int v = 0; v < V; ++v) acc[j][v] += my_bias[v];
      Activate(act, acc[j]);
      Vector<T, V> out;
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = FromFloat<T>(acc[j][v]);
      *reinterpret_cast<Vector<T, V>*>(y_row + (q0 + j) * d.c) = out;
    }
  }
}

// Channels-first: a thread computes kColumns consecutive output columns of
// one (n, c, p) row; consecutive threads take consecutive column groups, so
// a warp reads and writes along rows.
template <typename T, int kColumns, int kKernel, bool kWindow>
__global__ void DepthwiseChannelsFirst(const T* __restrict__ x, const T* __restrict__ w,
                                       const T* __restrict__ bias, T* __restrict__ y,
                                       DirectConvDims d, int column_groups, Activation act) {
  AwaitPreviousKernel();
  const unsigned group = blockIdx.x * blockDim.x + threadIdx.x;
  if (group >= static_cast<unsigned>(column_groups)) return;
  const int kernel_h = Extent<kKernel>(d.r), kernel_w = Extent<kKernel>(d.s);
  const unsigned groups_per_row = (d.q + kColumns - 1) / kColumns;
  const unsigned row = group / groups_per_row;  // (n * C + c) * P + p
  const int q0 = static_cast<int>(group - row * groups_per_row) * kColumns;
  const unsigned plane = row / static_cast<unsigned>(d.p);  // n * C + c
  const int p = static_cast<int>(row - plane * d.p);
  const int c = static_cast<int>(plane % static_cast<unsigned>(d.c));
  const T* x_plane = x + plane * d.h * d.w;
  const T* w_channel = w + c * kernel_h * kernel_w;
  float acc[kColumns];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int r = 0; r < kernel_h; ++r) {
    const int h = p * d.stride_h - d.pad_h + r * d.dilation_h;
    if (h < 0 || h >= d.h) continue;
    const T* x_row = x_plane + h * d.w;
    if constexpr (kWindow) {
      constexpr int kSpan = kColumns + kWindowTaps - 1;
      float in[kSpan];
#pragma unroll
      for (int t = 0; t < kSpan; ++t) {
        const int col = q0 - d.pad_w + t;
        in[t] = col >= 0 && col < d.w ? ToFloat(x_row[col]) : 0.0f;
      }
#pragma unroll
      for (int s = 0; s < kWindowTaps; ++s) {
        const float weight = ToFloat(w_channel[r * kWindowTaps + s]);
#pragma unroll
        for (int j = 0; j < kColumns; ++j) acc[j] = fmaf(in[j + s], weight, acc[j]);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kernel_w; ++s) {
        const float weight = ToFloat(w_channel[r * kernel_w + s]);
#pragma unroll
        for (int j = 0; j < kColumns; ++j) {
          const int col = (q0 + j) * d.stride_w - d.pad_w + s * d.dilation_w;
          if (q0 + j >= d.q || col < 0 || col >= d.w) continue;
          acc[j] = fmaf(ToFloat(x_row[col]), weight, acc[j]);
        }
      }
    }
  }
  const float b = bias != nullptr ? ToFloat(bias[c]) : 0.0f;
#pragma unroll
  for (int j = 0; j < kColumns; ++j) acc[j] += b;
  Activate(act, acc);
  T* y_row = y + row * d.q;
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    if (q0 + j >= d.q) break;
    y_row[q0 + j] = FromFloat<T>(acc[j]);
  }
}



// 3x3 kernels, the common depthwise size, get loops unrolled at compile
// time (with the widest vectors), and the window of kWindowTaps columns when
// W has stride and dilation 1; other sizes take the general kernel.
enum class Specialization { kGeneral, kThree, kThreeWindow };

Specialization SpecializationOf(const ConvLayerProblem& problem) {
  if (problem.weights[2] != 3 || problem.weights[3] != 3) return Specialization::kGeneral;
  return problem.stride[1] == 1 && problem.dilation[1] == 1 ? Specialization::kThreeWindow
                                                            : Specialization::kThree;
}

template <typename T, int V, int kColumns, int kKernel, bool kWindow>
absl::Status LaunchChannelsLast(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                                cudaStream_t stream) {
  const DirectConvDims d = DirectConvDimsOf(problem);
  const int taps = d.r * d.s;
  const int vectors = d.c / V;
  const int fitting = kSharedBytes / ((taps + 1) * V * static_cast<int>(sizeof(float)));
  const int block_vectors = std::max(1, std::min({vectors, kThreads, fitting}));
  const int groups_per_block = kThreads / block_vectors;
  const int column_groups = d.n * d.p * ((d.q + kColumns - 1) / kColumns);
  const int slices = (vectors + block_vectors - 1) / block_vectors;
  const int needed = (column_groups + groups_per_block - 1) / groups_per_block;
  const int sms = CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 132);
  const int resident = std::max(1, sms * kBlocksPerSm / slices);
  const dim3 grid(static_cast<unsigned>(std::min(needed, resident)),
                  static_cast<unsigned>(slices));
  const size_t shared = static_cast<size_t>(taps + 1) * block_vectors * V * sizeof(float);
  CUDA_RETURN_IF_ERROR(LaunchDependent(
      DepthwiseChannelsLast<T, V, kColumns, kKernel, kWindow>, grid, dim3(kThreads), shared,
      stream, static_cast<const T*>(b.x), static_cast<const T*>(b.w),
      static_cast<const T*>(b.bias), static_cast<T*>(b.y), d, block_vectors, column_groups,
      problem.activation));
  return absl::OkStatus();
}

template <typename T, int kColumns>
absl::Status LaunchChannelsFirst(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                                 cudaStream_t stream) {
  const DirectConvDims d = DirectConvDimsOf(problem);
  const int column_groups = d.n * d.c * d.p * ((d.q + kColumns - 1) / kColumns);
  const unsigned blocks = static_cast<unsigned>((column_groups + kThreads - 1) / kThreads);
  const auto* x = static_cast<const T*>(b.x);
  const auto* w = static_cast<const T*>(b.w);
  const auto* bias = static_cast<const T*>(b.bias);
  auto* y = static_cast<T*>(b.y);
  const auto launch = [&](auto kernel) {
    return LaunchDependent(kernel, dim3(blocks), dim3(kThreads), 0, stream, x, w, bias, y, d,
                           column_groups, problem.activation);
  };
  switch (SpecializationOf(problem)) {
    case Specialization::kThreeWindow:
      CUDA_RETURN_IF_ERROR(launch(DepthwiseChannelsFirst<T, kColumns, 3, true>));
      break;
    case Specialization::kThree:
      CUDA_RETURN_IF_ERROR(launch(DepthwiseChannelsFirst<T, kColumns, 3, false>));
      break;
    case Specialization::kGeneral:
      CUDA_RETURN_IF_ERROR(launch(DepthwiseChannelsFirst<T, kColumns, 0, false>));
      break;
  }
  return absl::OkStatus();
}

// Channels-last vectors: the widest of at most kWidest elements whose count
// divides C, so every vector starts on its own size.
template <typename T, int kColumns, int kWidest>
absl::Status DispatchVectorWidth(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                                 cudaStream_t stream) {
  const int64_t c = problem.input[1];
  if (c % kWidest == 0) {
    switch (SpecializationOf(problem)) {
      case Specialization::kThreeWindow:
        return LaunchChannelsLast<T, kWidest, kColumns, 3, true>(problem, b, stream);
      case Specialization::kThree:
        return LaunchChannelsLast<T, kWidest, kColumns, 3, false>(problem, b, stream);
      case Specialization::kGeneral:
        break;
    }
    return LaunchChannelsLast<T, kWidest, kColumns, 0, false>(problem, b, stream);
  }
  if (kWidest > 4 && c % 4 == 0) {
    return LaunchChannelsLast<T, 4, kColumns, 0, false>(problem, b, stream);
  }
  if (kWidest > 2 && c % 2 == 0) {
    return LaunchChannelsLast<T, 2, kColumns, 0, false>(problem, b, stream);
  }
  return LaunchChannelsLast<T, 1, kColumns, 0, false>(problem, b, stream);
}

template <typename T, int kColumns>
absl::Status DispatchVector(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                            int64_t vector_bytes, cudaStream_t stream) {
  if (vector_bytes == 16) {
    return DispatchVectorWidth<T, kColumns, 16 / sizeof(T)>(problem, b, stream);
  }
  return DispatchVectorWidth<T, kColumns, 8 / sizeof(T)>(problem, b, stream);
}

template <typename T, int kColumns>
absl::Status DispatchLayout(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                            int64_t vector_bytes, cudaStream_t stream) {
  if (problem.channels_last) {
    return DispatchVector<T, kColumns>(problem, b, vector_bytes, stream);
  }
  return LaunchChannelsFirst<T, kColumns>(problem, b, stream);
}

template <int kColumns>
absl::Status DispatchDtype(const ConvLayerProblem& problem, const ConvLayerBuffers& b,
                           int64_t vector_bytes, cudaStream_t stream) {
  switch (problem.dtype) {
    case DType::kFloat32:
      return DispatchLayout<float, kColumns>(problem, b, vector_bytes, stream);
    case DType::kFloat16:
      return DispatchLayout<__half, kColumns>(problem, b, vector_bytes, stream);
    case DType::kBFloat16:
      return DispatchLayout<__nv_bfloat16, kColumns>(problem, b, vector_bytes, stream);
  }
  return absl::InternalError("unknown dtype");
}

}  // namespace

int CurrentDeviceAttribute(cudaDeviceAttr attribute, int fallback) {
  struct Known {
    int device;
    cudaDeviceAttr attribute;
    int value;
  };
  thread_local std::vector<Known> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fallback;
  for (const Known& k : known) {
    if (k.device == device && k.attribute == attribute) return k.value;
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) return fallback;
  known.push_back({device, attribute, value});
  return value;
}

void SetClusterAndDependentLaunch(unsigned cluster_z, cudaLaunchAttribute (&attrs)[2],
                                  cudaLaunchConfig_t* config) {
  int count = 0;
  if (cluster_z > 1) {
    attrs[count] = {};
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = 1;
    attrs[count].val.clusterDim.y = 1;
    attrs[count].val.clusterDim.z = cluster_z;
    ++count;
  }
  config->attrs = attrs;
  config->numAttrs = static_cast<unsigned>(AddDependentLaunchAttribute(attrs, count));
}

int SpreadSharedBytes(int bytes, int64_t blocks, int64_t tiles) {
  if (tiles > blocks || blocks > CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 0)) {
    return bytes;
  }
  // Two blocks of this much (and the shared memory reserved for each) are
  // over the SM's; PrepareKernel opted the kernel into the block's limit.
  const int spread = CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0) / 2 -
                     CurrentDeviceAttribute(cudaDevAttrReservedSharedMemoryPerBlock, 0) + 16;
  if (spread > CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0)) return bytes;
  return std::max(bytes, spread);
}

absl::StatusOr<int> PrepareKernel(const void* kernel, int threads, int bytes) {
  struct Prepared {
    int device;
    const void* kernel;
    int threads, bytes, blocks;
  };
  thread_local std::vector<Prepared> prepared;
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  bool allowed = false;
  for (const Prepared& p : prepared) {
    if (p.device != device || p.kernel != kernel) continue;
    if (p.threads == threads && p.bytes == bytes) return p.blocks;
    allowed = true;
  }
  if (!allowed) {
    // All the shared memory a block may have, not `bytes`: the attribute
    // belongs to the kernel, not to this launch, and another thread may be
    // launching it with more at the same time.
    cudaFuncAttributes attributes;
    CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, kernel));
    const int most = CurrentDeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) -
                     static_cast<int>(attributes.sharedSizeBytes);
    if (bytes > most) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a block needs ", bytes, " bytes of shared memory; this GPU allows ", most));
    }
    CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  }
  int blocks = 0;
  CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, bytes));
  if (blocks < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a block of ", threads, " threads and ", bytes, " bytes of shared memory does not fit "
        "on an SM of this GPU"));
  }
  prepared.push_back({device, kernel, threads, bytes, blocks});
  return blocks;
}

DirectConvDims DirectConvDimsOf(const ConvLayerProblem& p) {
  DirectConvDims d;
  d.n = static_cast<int>(p.input[0]);
  d.c = static_cast<int>(p.input[1]);
  d.h = static_cast<int>(p.input[2]);
  d.w = static_cast<int>(p.input[3]);
  d.k = static_cast<int>(p.output[1]);
  d.p = static_cast<int>(p.output[2]);
  d.q = static_cast<int>(p.output[3]);
  d.r = static_cast<int>(p.weights[2]);
  d.s = static_cast<int>(p.weights[3]);
  d.stride_h = static_cast<int>(p.stride[0]);
  d.stride_w = static_cast<int>(p.stride[1]);
  d.dilation_h = static_cast<int>(p.dilation[0]);
  d.dilation_w = static_cast<int>(p.dilation[1]);
  d.pad_h = static_cast<int>(p.pad_before[0]);
  d.pad_w = static_cast<int>(p.pad_before[1]);
  return d;
}

absl::Status CheckDirectConvBuffers(const ConvLayerProblem& problem,
                                    const ConvLayerBuffers& buffers) {
  for (const void* pointer : {buffers.x, buffers.w, buffers.bias, buffers.w_narrow,
                              static_cast<const void*>(buffers.y)}) {
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0) {
      return absl::InvalidArgumentError("a tensor of a direct conv is not 16-byte aligned");
    }
  }
  if (buffers.x == nullptr || buffers.w == nullptr || buffers.y == nullptr ||
      (problem.has_bias && buffers.bias == nullptr)) {
    return absl::InvalidArgumentError("a tensor of a direct conv has no buffer");
  }
  if (buffers.w_narrow == nullptr && DirectNarrowPackedBytes(problem) > 0) {
    return absl::InvalidArgumentError(
        "the direct narrow GEMM needs its packed weights (DeviceWeights::narrow_weights)");
  }
  return absl::OkStatus();
}

absl::Status LaunchDirectConv(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream) {
  if (NumElements(problem.output) == 0) return absl::OkStatus();
  ConvLayerBuffers b = buffers;
  if (!problem.has_bias) b.bias = nullptr;
  if (id.engine == kDirectGemmEngine) return LaunchDirectGemm(problem, id, b, stream);
  if (id.engine == kDirectNarrowEngine) return LaunchDirectNarrow(problem, id, b, stream);
  if (id.engine == kDirectPointwiseEngine) return LaunchDirectPointwise(problem, id, b, stream);
  if (id.engine == kDirectHaloEngine) return LaunchDirectHalo(problem, id, b, stream);
  const int64_t vector_bytes = DirectKnob(id, kDirectKnobVectorBytes);
  switch (DirectKnob(id, kDirectKnobColumns)) {
    case 1:
      return DispatchDtype<1>(problem, b, vector_bytes, stream);
    case 2:
      return DispatchDtype<2>(problem, b, vector_bytes, stream);
    case 4:
      return DispatchDtype<4>(problem, b, vector_bytes, stream);
  }
  return absl::InvalidArgumentError(absl::StrCat(id.ToString(), " is not a direct configuration"));
}

}  // namespace convserve
