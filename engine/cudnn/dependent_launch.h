// Programmatic dependent launch for convserve's own kernels (the direct
// path, the pointwise pair, the bias+activation kernel). On compute
// capability 9.0 and newer such a kernel is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, so its blocks may be
// scheduled while the kernel before it on the stream is still finishing;
// stream capture turns that into a programmatic edge of the CUDA graph.
// Every block of ours first waits (griddepcontrol.wait) until the kernel
// before it has completed and its memory is visible, before it reads or
// writes any tensor: what overlaps is the launch, never the memory traffic,
// so the stream's order holds for the data as before.
//
// No kernel of ours triggers its dependents early
// (griddepcontrol.launch_dependents), so the next kernel is launched when
// every block of this one has exited, not at its completion event: that
// hides the launch latency between two kernels, the previous one a cuDNN
// kernel too. Triggering at each block's start was tried and was slower
// (H200, 2026-11-28: chains of our kernels up to 26% slower, the stem 10.2
// against 9.4 us at batch 1), likely (not measured apart) because the next
// kernel's blocks were placed while the previous one's still held most SMs
// and crowded onto the few SMs that had room (docs/runtime.md, "Dependent
// launches"). cuDNN's kernels are not launched this way.
//
// On by default; SetDependentLaunch(false) (--dependent_launch=false) makes
// every launch a plain one.
#ifndef CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_
#define CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_

#include <cuda_runtime.h>

#include <utility>

namespace convserve {

// Process-wide; read at each launch.
void SetDependentLaunch(bool on);
bool DependentLaunchEnabled();

// Appends the programmatic stream serialization attribute to `attrs` at
// `count` when dependent launch is on and the current device has compute
// capability 9.0 or newer; returns the new count. `attrs` has room for it.
int AddDependentLaunchAttribute(cudaLaunchAttribute* attrs, int count);

// `kernel`<<<grid, block, shared, stream>>>(args...) with the attribute
// above; cudaLaunchKernelEx's error.
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attrs[1];
  config.attrs = attrs;
  config.numAttrs = static_cast<unsigned>(AddDependentLaunchAttribute(attrs, 0));
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

#ifdef __CUDACC__
// First in every kernel LaunchDependent launches: waits for the previous
// kernel on the stream (its completion and memory). A no-op when the kernel
// was launched without the attribute; below sm_90 there is no such
// instruction and nothing to do.
__device__ __forceinline__ void AwaitPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#endif

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_
