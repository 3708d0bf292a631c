// Programmatic dependent launch for convserve's own kernels (the direct
// path, the pointwise pair, the bias+activation kernel). On compute
// capability 9.0 and newer such a kernel is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, so its blocks may be
// scheduled while the kernel before it on the stream is still finishing;
// stream capture turns that into a programmatic edge of the CUDA graph.
// Every block of ours waits (griddepcontrol.wait, AwaitPreviousKernel)
// until the kernel before it has completed and its memory is visible
// before it reads its input or writes its output, so the stream's order
// holds for the data as before.
//
// What may overlap the kernel before:
// - the GEMMs (implicit, pointwise, halo, narrow) and the pointwise pair
//   release their dependents (griddepcontrol.launch_dependents,
//   ReleaseDependents) once a block has issued its last tile's MMAs; the
//   depthwise and bias+activation kernels release at exit;
// - they and the channels-last depthwise kernel copy their weights and
//   biases (the implicit GEMM: its first pipeline stages') before they
//   wait. That reads them before the kernel just before is known to be
//   done, which holds as long as no kernel writes them: weights and biases
//   are uploaded by copies (DeviceWeights), and the prober's random fills
//   (ProbeBuffers::Reset) are followed by the output's memset before any
//   candidate runs. A kernel that wrote a layer's weights right before the
//   layer ran would break it;
// - early placement can crowd the next kernel's blocks onto the few SMs
//   the kernel before has left, so grids of one tile a block (but the
//   narrow GEMM's) take an SM each (SpreadSharedBytes,
//   direct_conv_kernel.h).
// cuDNN's kernels are not launched this way; a cuDNN plan whose first
// kernel was seen to wait for the kernel before it is entered by a
// programmatic edge in captured graphs (programmatic_entry.h). What each step bought and
// cost, measured on H200s, and what was tried and dropped (releasing at
// each block's start) are in docs/runtime.md, "Dependent launches".
//
// On by default; SetDependentLaunch(false) (--dependent_launch=false) makes
// every launch a plain one.
#ifndef CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_
#define CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_

#include <cuda_runtime.h>

#include <utility>

#include "absl/status/status.h"

namespace convserve {

// Process-wide; read at each launch.
void SetDependentLaunch(bool on);
bool DependentLaunchEnabled();

// Appends the programmatic stream serialization attribute to `attrs` at
// `count` when dependent launch is on and the current device has compute
// capability 9.0 or newer; returns the new count. `attrs` has room for it.
int AddDependentLaunchAttribute(cudaLaunchAttribute* attrs, int count);

// Process-wide, read at each capture: whether cuDNN plans that
// AdmitProgrammaticEntry admitted are entered by programmatic edges
// (--programmatic_entry; on by default). Needs dependent launch on too.
void SetProgrammaticEntry(bool on);
bool ProgrammaticEntryEnabled();

// While `stream` is capturing and programmatic entry is on: makes the edges
// from the stream's last captured nodes to the next node captured
// programmatic, when every one of those nodes is a kernel. Otherwise does
// nothing. The next node captured must be a kernel that waits
// (griddepcontrol.wait) before it touches what the kernels before it use.
absl::Status EnterNextProgrammatically(cudaStream_t stream);

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
// In every kernel LaunchDependent launches, before it reads its input or
// writes its output: waits for the previous kernel on the stream (its
// completion and memory). A no-op when the kernel was launched without the
// attribute; below sm_90 there is no such instruction and nothing to do.
__device__ __forceinline__ void AwaitPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream launch once every block of this one
// has called it (or exited); in the GEMMs and the pair at a block's last
// tile. A no-op below sm_90 and when the
// next kernel was launched without the attribute.
__device__ __forceinline__ void ReleaseDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DEPENDENT_LAUNCH_H_
