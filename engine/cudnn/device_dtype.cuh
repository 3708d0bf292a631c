// Element conversions for the project's CUDA kernels: every graph dtype is
// read into float and written back from float with round-to-nearest-even;
// float rounded to TF32 for tensor cores.
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

// `v` rounded to TF32 (10 mantissa bits), as the 32 bits a TF32 MMA reads,
// to nearest: ties to even from sm_90 on (cvt.rn, one instruction there;
// ties away, cvt.rna, takes three: a compare, an add and a mask), ties away
// before (sm_80 has no cvt.rn to TF32).
__device__ inline unsigned Tf32Bits(float v) {
  unsigned bits;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(v));
#else
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(v));
#endif
  return bits;
}

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEVICE_DTYPE_CUH_
