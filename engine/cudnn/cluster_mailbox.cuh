// Partial sums sent between the blocks of a thread-block cluster without a
// cluster-wide memory fence (sm_90 and newer).
//
// cooperative_groups' cluster.sync() releases at cluster scope, which an H100
// runs as MEMBAR.ALL.GPU: a block waits there until all its earlier memory
// operations are done at GPU scope, its output stores and copies in flight
// included. In the implicit GEMM's split reduction (3x3 512 @ 7, batch 1,
// float16) the two syncs that fenced it held 28% of the warps' stall samples
// (Nsight Compute, host CG). A mailbox replaces them: a block's transaction
// barrier (mbarrier) is told how many bytes its peers will send; they send
// them with st.async, whose bytes count the barrier down as they land, so
// the owner waits for exactly its data and a sender never waits for
// anything after its stores. A block that reuses its mailbox tells the
// senders it has read it with a signal (SignalPeer). The one cluster
// barrier left is relaxed, arrived at when the kernel starts and waited on
// before the first send: every peer's barriers are set up by then.
#ifndef CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_
#define CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_

#include <cstdint>

namespace convserve {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ inline unsigned SharedAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The address of `local`'s counterpart in block `rank`'s shared memory.
__device__ inline unsigned PeerAddress(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(SharedAddress(local)), "r"(rank));
  return remote;
}

// Thread 0 only. A mailbox: a barrier (8-byte aligned shared memory) whose
// first phase completes when `bytes` have landed.
__device__ inline void InitMailbox(uint64_t* barrier, unsigned bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(SharedAddress(barrier))
               : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
}
// Thread 0 only. A signal: a barrier whose phases complete when a peer
// arrives at it once (SignalPeer).
__device__ inline void InitSignal(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(SharedAddress(barrier))
               : "memory");
}
// Every thread of every block of the cluster, once, after its block's
// InitMailbox and InitSignal calls: the barriers are set up, as seen from
// the peers once they have passed AwaitPeerMailboxes; arrives at the
// cluster barrier, relaxed.
__device__ inline void AnnounceMailboxes() {
  if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
// Every thread, once, before its block first sends to or signals a peer.
__device__ inline void AwaitPeerMailboxes() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// 16 bytes into block `rank`'s shared memory at the offset `local` has in
// this block's, counted against that block's mailbox `barrier` (the same
// offset in each block). `local` is 16-byte aligned.
__device__ inline void SendToPeer(const float4& value, const float* local, uint64_t* barrier,
                                  unsigned rank) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(PeerAddress(local, rank)),
      "r"(__float_as_uint(value.x)), "r"(__float_as_uint(value.y)),
      "r"(__float_as_uint(value.z)), "r"(__float_as_uint(value.w)),
      "r"(PeerAddress(barrier, rank))
      : "memory");
}

// Waits until the phase of `barrier` with parity `parity` (phase i has
// parity i % 2) is complete: for a mailbox, its bytes have landed and are
// visible to the calling thread. A waiter may be one phase behind at most.
__device__ inline void AwaitMail(uint64_t* barrier, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(SharedAddress(barrier)), "r"(parity)
        : "memory");
  }
}
// Thread 0 only, after every thread of the block has waited for the
// mailbox's current phase: the next one completes when `bytes` more have
// landed.
__device__ inline void ExpectMail(uint64_t* barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
}

// Completes the current phase of block `rank`'s signal `barrier` (the same
// offset in each block). Relaxed: it orders none of this thread's memory
// operations, so a caller signalling "read" has used every value it read
// first (and a block barrier orders the other threads' reads before it).
// A release here would be a GPU-scope fence, as in cluster.sync().
__device__ inline void SignalPeer(uint64_t* barrier, unsigned rank) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(
                   PeerAddress(barrier, rank))
               : "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_CLUSTER_MAILBOX_CUH_
