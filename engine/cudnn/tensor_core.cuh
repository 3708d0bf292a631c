// Device helpers shared by convserve's tensor-core kernels (the pointwise
// pair and the direct path's implicit GEMM): mma.sync and ldmatrix for the
// 16-bit dtypes and TF32, cp.async copies, and activations with their kind
// fixed at compile time. sm_80 and newer.
#ifndef CONVSERVE_ENGINE_CUDNN_TENSOR_CORE_CUH_
#define CONVSERVE_ENGINE_CUDNN_TENSOR_CORE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>

#include "engine/activation.h"
#include "engine/cudnn/device_dtype.cuh"

namespace convserve {

// mma.sync over 32 bytes of the reduction per row, row-major A,
// column-major B, float32 C += A * B: m16n8k16 for the 16-bit types,
// m16n8k8 TF32 for float (its operands rounded first, RoundToTf32). Both
// take their fragments from the same ldmatrix.x4 addresses: a thread's 32
// bits of row g are elements 2t, 2t+1 of a 16-bit row and element t of a
// float row, where each shape wants them.
template <typename T>
__device__ inline void Mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ inline void Mma<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                   unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void Mma<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ inline void Mma<float>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                  unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// For float, a fragment's four values rounded to TF32 (Tf32Bits), where
// mma would otherwise drop their low 13 bits; the 16-bit types' fragments
// are left as they are.
template <typename T>
__device__ inline void RoundToTf32(unsigned (&r)[4]) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = Tf32Bits(__uint_as_float(r[i]));
  }
}

// Two floats rounded to T, as one 32-bit register (lo in the low half).
template <typename T>
__device__ inline unsigned Pack(float lo, float hi) {
  const T pair[2] = {FromFloat<T>(lo), FromFloat<T>(hi)};
  unsigned bits;
  memcpy(&bits, pair, sizeof(bits));
  return bits;
}

// Two floats rounded to T, stored at p and p + 1 (p 4-byte aligned for the
// 16-bit types, 8-byte for float).
template <typename T>
__device__ inline void StoreTwo(T* p, float v0, float v1) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<unsigned*>(p) = Pack<T>(v0, v1);
  }
}

__device__ inline void LdMatrixX4(unsigned (&r)[4], const void* shared) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Named barrier `id` (1-15; 0 is __syncthreads') of `threads` threads, a
// multiple of 32: the calling warps wait for each other only, and their
// shared-memory writes before it are visible to each other after it.
__device__ inline void GroupBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid.
__device__ inline void CopyAsync16(void* shared, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0));
}
__device__ inline void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n"); }
// Waits until at most kPending of this thread's committed groups are in flight.
template <int kPending>
__device__ inline void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// The activation with its kind fixed at compile time (the switch in
// ApplyActivation folds away): the formulas the CPU reference and the
// bias+activation kernel use.
template <ActivationKind K>
__device__ inline float Activate(const Activation& activation, float x) {
  Activation fixed = activation;
  fixed.kind = K;
  return ApplyActivation(fixed, x);
}

// Calls epilogue.template Run<K>() for the kind of `activation`.
template <typename Epilogue>
__device__ inline void WithKind(const Activation& activation, const Epilogue& epilogue) {
  switch (activation.kind) {
    case ActivationKind::kIdentity: epilogue.template Run<ActivationKind::kIdentity>(); break;
    case ActivationKind::kRelu: epilogue.template Run<ActivationKind::kRelu>(); break;
    case ActivationKind::kTanh: epilogue.template Run<ActivationKind::kTanh>(); break;
    case ActivationKind::kSigmoid: epilogue.template Run<ActivationKind::kSigmoid>(); break;
    case ActivationKind::kElu: epilogue.template Run<ActivationKind::kElu>(); break;
    case ActivationKind::kGelu: epilogue.template Run<ActivationKind::kGelu>(); break;
    case ActivationKind::kGeluTanh: epilogue.template Run<ActivationKind::kGeluTanh>(); break;
    case ActivationKind::kSoftplus: epilogue.template Run<ActivationKind::kSoftplus>(); break;
    case ActivationKind::kSwish: epilogue.template Run<ActivationKind::kSwish>(); break;
  }
}

template <ActivationKind K>
struct KindActivation {
  const Activation& activation;
  __device__ float operator()(float x) const { return Activate<K>(activation, x); }
};


}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_TENSOR_CORE_CUH_
