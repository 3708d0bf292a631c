#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "engine/cudnn/bias_activation.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/device_dtype.cuh"

namespace convserve {
namespace {

// Each thread handles kVector consecutive elements through one 16-byte load
// and store; `vector_count` = total / kVector, and the tail (total %
// kVector) is handled element-wise by the first threads.
template <typename T>
__global__ void BiasActivationKernel(T* y, const T* bias, int64_t total, int64_t channels,
                                     int64_t spatial, bool channels_last, Activation act) {
  AwaitPreviousKernel();
  constexpr int kVector = 16 / sizeof(T);
  union Pack {
    uint4 raw;
    T values[kVector];
  };
  const int64_t vector_count = total / kVector;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto channel_of = [&](int64_t i) {
    return channels_last ? i % channels : (i / spatial) % channels;
  };
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vector_count;
       v += stride) {
    Pack pack;
    pack.raw = reinterpret_cast<const uint4*>(y)[v];
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      const int64_t i = v * kVector + j;
      float x = ToFloat(pack.values[j]);
      if (bias != nullptr) x += ToFloat(bias[channel_of(i)]);
      pack.values[j] = FromFloat<T>(ApplyActivation(act, x));
    }
    reinterpret_cast<uint4*>(y)[v] = pack.raw;
  }
  const int64_t tail = vector_count * kVector + static_cast<int64_t>(blockIdx.x) * blockDim.x +
                       threadIdx.x;
  if (tail < total) {
    float x = ToFloat(y[tail]);
    if (bias != nullptr) x += ToFloat(bias[channel_of(tail)]);
    y[tail] = FromFloat<T>(ApplyActivation(act, x));
  }
}

// y = act(x + bias) from a float32 conv output: 16-byte loads of four
// floats, one rounding to T per element.
template <typename T>
__global__ void WideningBiasActivationKernel(T* y, const float* x, const T* bias, int64_t total,
                                             int64_t channels, int64_t spatial,
                                             bool channels_last, Activation act) {
  AwaitPreviousKernel();
  constexpr int kVector = 4;
  const int64_t vector_count = total / kVector;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto finish = [&](int64_t i, float v) {
    const int64_t channel = channels_last ? i % channels : (i / spatial) % channels;
    if (bias != nullptr) v += ToFloat(bias[channel]);
    y[i] = FromFloat<T>(ApplyActivation(act, v));
  };
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vector_count;
       v += stride) {
    const float4 in = reinterpret_cast<const float4*>(x)[v];
    finish(v * kVector + 0, in.x);
    finish(v * kVector + 1, in.y);
    finish(v * kVector + 2, in.z);
    finish(v * kVector + 3, in.w);
  }
  const int64_t tail = vector_count * kVector + static_cast<int64_t>(blockIdx.x) * blockDim.x +
                       threadIdx.x;
  if (tail < total) finish(tail, x[tail]);
}

template <typename T>
absl::Status Launch(const BiasActivationArgs& args, cudaStream_t stream) {
  const int64_t total = args.batch * args.channels * args.spatial;
  if (total == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  constexpr int64_t kVector = 16 / sizeof(T);
  const int64_t work = std::max<int64_t>(total / kVector, 1);
  // Enough blocks to fill the GPU several times; the loop strides over the rest.
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 65535));
  if (args.float_input != nullptr) {
    CUDA_RETURN_IF_ERROR(LaunchDependent(
        WideningBiasActivationKernel<T>, dim3(blocks), dim3(kThreads), 0, stream,
        static_cast<T*>(args.y), static_cast<const float*>(args.float_input),
        static_cast<const T*>(args.bias), total, args.channels, args.spatial, args.channels_last,
        args.activation));
  } else {
    CUDA_RETURN_IF_ERROR(LaunchDependent(BiasActivationKernel<T>, dim3(blocks), dim3(kThreads), 0,
                                         stream, static_cast<T*>(args.y),
                                         static_cast<const T*>(args.bias), total, args.channels,
                                         args.spatial, args.channels_last, args.activation));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchBiasActivation(const BiasActivationArgs& args, cudaStream_t stream) {
  // The vector loads need 16-byte alignment; cudaMalloc gives 256.
  if (reinterpret_cast<uintptr_t>(args.y) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(args.float_input) % 16 != 0) {
    return absl::InternalError("bias+activation input or output is not 16-byte aligned");
  }
  switch (args.dtype) {
    case DType::kFloat32:
      return Launch<float>(args, stream);
    case DType::kFloat16:
      return Launch<__half>(args, stream);
    case DType::kBFloat16:
      return Launch<__nv_bfloat16>(args, stream);
  }
  return absl::InternalError("unknown dtype");
}

}  // namespace convserve
