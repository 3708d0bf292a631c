// Warpgroup MMAs (wgmma, sm_90a) for the direct path's implicit GEMM and
// the pointwise pair kernel: a warpgroup (4 warps, 128 threads) multiplies
// 64 rows of A by N rows of B, B read from shared memory through a
// descriptor and A from one too or from registers, and adds into float32
// accumulators held in the same places mma.sync m16n8 leaves them: warp w's
// thread (g, t) holds rows 16w + g and 16w + g + 8 at columns 8f + 2t and
// 8f + 2t + 1 of n8 block f, as d[f][0..1] and d[f][2..3].
//
// Only for code compiled for sm_90a (CONVSERVE_WGMMA is 1 there): wgmma is
// not in the PTX of plain compute_90, which the build also ships so newer
// GPUs can JIT it; callers keep an mma.sync path for that.
#ifndef CONVSERVE_ENGINE_CUDNN_WGMMA_CUH_
#define CONVSERVE_ENGINE_CUDNN_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONVSERVE_WGMMA 1
#else
#define CONVSERVE_WGMMA 0
#endif

namespace convserve {

// The descriptor of a K-major operand tile at `tile` in shared memory: rows
// of 64 bytes of the reduction, their 16-byte segments XOR-swizzled by bits
// 1-2 of the row (the hardware's 64-byte swizzle, which repeats every 8 rows,
// so `tile` must sit on a 512-byte boundary). Fields (PTX ISA, "matrix
// descriptor"): start address >> 4 in bits 0-13; leading byte offset (unused
// for swizzled K-major tiles, 1 by convention) in 16-29; stride byte offset,
// 8 rows = 512 bytes, >> 4 in 32-45; swizzle mode 2 (64 bytes) in 62-63.
// Adding n to the descriptor moves its start 16n bytes along the row: the
// next 32 bytes of the reduction is + 2.
__device__ inline uint64_t WgmmaDescriptor64B(const void* tile) {
  const uint64_t address = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  return ((address >> 4) & 0x3FFF) | (uint64_t{1} << 16) | (uint64_t{512 >> 4} << 32) |
         (uint64_t{2} << 62);
}

// Orders this thread's earlier writes to shared memory (st.shared, cp.async)
// before later reads of it by wgmma, which reads through the async proxy.
__device__ inline void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Before a warpgroup's first wgmma of a batch (the accumulators were last
// touched by ordinary instructions, or by a batch already waited for).
__device__ inline void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Pins the accumulators `d` in place for the compiler: ordinary writes to
// them (zeros) stay before this point and reads after it, so none lands
// between a WgmmaFence and the wgmma that follows it (ptxas would then make
// the warpgroup wait there).
template <int kBlocks>
__device__ inline void WgmmaFenceOperands(float (&d)[kBlocks][4]) {
#pragma unroll
  for (int f = 0; f < kBlocks; ++f) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[f][e])::"memory");
  }
}
// Waits until at most kPending of the warpgroup's committed batches are in
// flight; then the accumulators `d` of the finished ones may be read, and
// their shared memory overwritten.
template <int kPending, int kBlocks>
__device__ inline void WgmmaWait(float (&d)[kBlocks][4]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
  WgmmaFenceOperands(d);
}

// d += A * B^T over 32 bytes (16 elements) of the reduction, m64nNk16, for
// float16 and bfloat16. a and b are WgmmaDescriptor64B descriptors; both
// operands K-major.
template <typename T, int N>
__device__ inline void Wgmma(float (&d)[N / 8][4], uint64_t a, uint64_t b);
// The same with A from registers (`a`: this thread's m64k16 fragment, laid
// out as mma.sync m16n8k16's A for its warp's 16 rows, which is also how
// the accumulators of two adjacent n8 blocks lie once packed in pairs);
// for float, m64nNk8 in TF32 over 32 bytes (8 elements), `a` laid out as
// mma.sync m16n8k8's and already rounded (RoundToTf32), as must B be: wgmma
// would drop a float's low 13 bits unrounded.
// `a` must stay unchanged until the batch is waited for.
// With `accumulate` false, d = A * B (whatever d held).
template <typename T, int N>
__device__ inline void WgmmaRegisterA(float (&d)[N / 8][4], const unsigned (&a)[4], uint64_t b,
                                      bool accumulate = true);

#if CONVSERVE_WGMMA
// The accumulator operands of an m64n32 (4 n8 blocks) and an m64n64 (8)
// wgmma, in d[f][e] order; the instruction's next operands follow them.
#define CONVSERVE_WGMMA_D4                                                                      \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
#define CONVSERVE_WGMMA_D8                                                                      \
  CONVSERVE_WGMMA_D4, "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]),  \
      "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define CONVSERVE_WGMMA_REGS4 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define CONVSERVE_WGMMA_REGS8                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// One specialization per dtype (T, PTX type kType) and N (the accumulator
// operands kD and their list kRegs), with the numbers of the operands that
// follow them: A as a descriptor (kA, Wgmma) or 4 registers (kA0-kA3,
// WgmmaRegisterA), B's descriptor (kB), and the value (kOne) that sets the
// scale-d predicate: accumulate into d, or not.
#define CONVSERVE_WGMMA_DESCRIPTORS(T, kType, kN, kD, kRegs, kA, kB, kOne)                \
  template <>                                                                             \
  __device__ inline void Wgmma<T, kN>(float(&d)[kN / 8][4], uint64_t a, uint64_t b) {     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #kOne ", 0;\n"                       \
                 "wgmma.mma_async.sync.aligned.m64n" #kN "k16.f32." kType "." kType " " kRegs \
                 ", %" #kA ", %" #kB ", p, 1, 1, 0, 0;\n}\n"                                 \
                 : kD                                                                     \
                 : "l"(a), "l"(b), "r"(1));                                               \
  }
// kShape and kScales: the instruction's k and types, and the immediates
// after the predicate (no transpose of B for TF32).
#define CONVSERVE_WGMMA_REGISTER_A(T, kShape, kScales, kN, kD, kRegs, kA0, kA1, kA2, kA3, kB,   \
                                   kOne)                                                      \
  template <>                                                                                 \
  __device__ inline void WgmmaRegisterA<T, kN>(float(&d)[kN / 8][4], const unsigned(&a)[4],   \
                                               uint64_t b, bool accumulate) {                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #kOne ", 0;\n"                           \
                 "wgmma.mma_async.sync.aligned.m64n" #kN kShape " " kRegs ", {%" #kA0          \
                 ", %" #kA1 ", %" #kA2 ", %" #kA3 "}, %" #kB ", p, " kScales ";\n}\n"           \
                 : kD                                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate ? 1 : 0)); \
  }
CONVSERVE_WGMMA_DESCRIPTORS(__half, "f16", 32, CONVSERVE_WGMMA_D4, CONVSERVE_WGMMA_REGS4, 16, 17, 18)
CONVSERVE_WGMMA_DESCRIPTORS(__half, "f16", 64, CONVSERVE_WGMMA_D8, CONVSERVE_WGMMA_REGS8, 32, 33, 34)
CONVSERVE_WGMMA_DESCRIPTORS(__nv_bfloat16, "bf16", 32, CONVSERVE_WGMMA_D4, CONVSERVE_WGMMA_REGS4, 16,
                            17, 18)
CONVSERVE_WGMMA_DESCRIPTORS(__nv_bfloat16, "bf16", 64, CONVSERVE_WGMMA_D8, CONVSERVE_WGMMA_REGS8, 32,
                            33, 34)
CONVSERVE_WGMMA_REGISTER_A(__half, "k16.f32.f16.f16", "1, 1, 0", 32, CONVSERVE_WGMMA_D4,
                           CONVSERVE_WGMMA_REGS4, 16, 17, 18, 19, 20, 21)
CONVSERVE_WGMMA_REGISTER_A(__half, "k16.f32.f16.f16", "1, 1, 0", 64, CONVSERVE_WGMMA_D8,
                           CONVSERVE_WGMMA_REGS8, 32, 33, 34, 35, 36, 37)
CONVSERVE_WGMMA_REGISTER_A(__nv_bfloat16, "k16.f32.bf16.bf16", "1, 1, 0", 32, CONVSERVE_WGMMA_D4,
                           CONVSERVE_WGMMA_REGS4, 16, 17, 18, 19, 20, 21)
CONVSERVE_WGMMA_REGISTER_A(__nv_bfloat16, "k16.f32.bf16.bf16", "1, 1, 0", 64, CONVSERVE_WGMMA_D8,
                           CONVSERVE_WGMMA_REGS8, 32, 33, 34, 35, 36, 37)
CONVSERVE_WGMMA_REGISTER_A(float, "k8.f32.tf32.tf32", "1, 1", 32, CONVSERVE_WGMMA_D4,
                           CONVSERVE_WGMMA_REGS4, 16, 17, 18, 19, 20, 21)
CONVSERVE_WGMMA_REGISTER_A(float, "k8.f32.tf32.tf32", "1, 1", 64, CONVSERVE_WGMMA_D8,
                           CONVSERVE_WGMMA_REGS8, 32, 33, 34, 35, 36, 37)
#undef CONVSERVE_WGMMA_DESCRIPTORS
#undef CONVSERVE_WGMMA_REGISTER_A
#undef CONVSERVE_WGMMA_D4
#undef CONVSERVE_WGMMA_D8
#undef CONVSERVE_WGMMA_REGS4
#undef CONVSERVE_WGMMA_REGS8
#endif  // CONVSERVE_WGMMA

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_WGMMA_CUH_
