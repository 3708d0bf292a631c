// Partial sums sent between the blocks of a thread-block cluster without a
// cluster-wide memory fence (sm_90 and newer).
//
// cooperative_groups' cluster.sync() releases at cluster scope, which an H100
// runs as MEMBAR.ALL.GPU: a block waits there until all its earlier memory
// operations are done at GPU scope, its output stores included. In the
// implicit GEMM's split reduction (3x3 512 @ 7, batch 1, float16) the two
// syncs that fenced it held 28% of the warps' stall samples (Nsight Compute,
// host CG). A mailbox replaces both: each block has a transaction barrier
// (mbarrier) told how many bytes its peers will send; they send them with
// st.async, whose bytes count down that barrier as they land, so the owner
// waits for exactly its data and a sender never waits for anything after
// its stores. The one cluster barrier left is relaxed, arrived at when the
// kernel starts and waited on before the first send: every peer's barrier
// is set up by then.
#ifndef CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_
#define CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_

#include <cstdint>

namespace convserve {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// This block's mailbox: the barrier (8-byte aligned shared memory) expects
// `bytes` from its peers; then every thread arrives at the cluster barrier,
// relaxed. Called by every thread of every block of the cluster, once, with
// the same `bytes` within a block.
__device__ inline void OpenMailbox(uint64_t* barrier, unsigned bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(barrier));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(address) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(address),
                 "r"(bytes)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}

// Every peer's mailbox is open: call once, by every thread, before the
// first SendToPeer.
__device__ inline void AwaitPeerMailboxes() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// 16 bytes into block `rank`'s shared memory at the offset `local` has in
// this block's, counted against that block's mailbox `barrier` (the same
// offset in each block). `local` is 16-byte aligned.
__device__ inline void SendToPeer(const float4& value, const float* local, uint64_t* barrier,
                                  unsigned rank) {
  unsigned remote, remote_barrier;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(local))), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote_barrier)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(barrier))), "r"(rank));
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(remote),
      "r"(__float_as_uint(value.x)), "r"(__float_as_uint(value.y)),
      "r"(__float_as_uint(value.z)), "r"(__float_as_uint(value.w)), "r"(remote_barrier)
      : "memory");
}

// Waits until every byte this block's mailbox expects has landed; the bytes
// are then visible to the calling thread.
__device__ inline void AwaitMail(uint64_t* barrier) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(barrier));
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(address)
        : "memory");
  }
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_
