// Element conversions for the project's CUDA kernels: every graph dtype is
// read into float and written back from float with round-to-nearest-even.
#ifndef CONVSERVE_ENGINE_CUDNN_DEVICE_DTYPE_CUH_
#define CONVSERVE_ENGINE_CUDNN_DEVICE_DTYPE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace convserve {

__device__ inline float ToFloat(float v) { return v; }
__device__ inline float ToFloat(__half v) { return __half2float(v); }
__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ inline T FromFloat(float v);
template <>
__device__ inline float FromFloat<float>(float v) { return v; }
template <>
__device__ inline __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEVICE_DTYPE_CUH_
