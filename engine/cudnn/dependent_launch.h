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
// The implicit, pointwise, halo and narrow GEMMs and the pointwise pair
// release their dependents (griddepcontrol.launch_dependents,
// ReleaseDependents) once a block has reached its last tile's MMAs, and
// they and the channels-last depthwise kernel copy their weights and biases
// (the implicit GEMM: its first stages' weights) before they wait: so the
// next kernel's blocks are placed, and copy their weights, while this
// one's blocks finish. That
// reads them before the kernel just before on the stream is known to be
// done, which holds as long as that kernel never writes them: weights and
// biases are uploaded by copies (DeviceWeights), and the prober's random
// fills (ProbeBuffers::Reset) are followed by the output's memset before
// any candidate runs. A kernel that wrote a layer's weights right before
// the layer ran would break it. On an H200 (2026-11-29, hosts BG and BH,
// graph replay of one layer, against releasing at exit) that took ResNet-50's
// float16 layers at batch 1 from 3.72 to 3.45-3.49 us (3x3 64 @ 56), 5.07-5.12
// to 4.84-4.88 (3x3 128 @ 28), 5.74 to 5.00 (3x3 256 @ 14), 3.00 to 2.57
// (1x1 64->256) and 6.37 to 6.11 (3x3 512 @ 7), and 64->256 at batch 32
// from 21.8 to 20.7; the stacks moved by 1% or less. The narrow GEMM, the
// pair and the depthwise kernel followed (host BK, against the GEMMs
// alone): the stem at batch 1 9.12-9.15 -> 7.49-7.50 us in float16 and
// 15.98-15.99 -> 12.76-12.80 in float32 (its weight copy, element by
// element, now overlaps the kernel before), depthwise layers 2%, the
// ResNet-50 stack 33.4 -> 30.9 us at batch 1 and 152.5 -> 148.0-148.7 at
// batch 32 (its pairs follow the halo GEMM). The implicit GEMM followed
// (host BN, against the build before, two runs each): float16 at batch 1
// 1x1 s2 256->512 3.92 -> 3.48 us, 2048->512 4.53 -> 4.25, 256->64 3.25
// (cuDNN's) -> 3.05, 3x3 512 @ 7 6.11 -> 5.93; float32 64->64 3.13 -> 2.96.
// Early placement can crowd, though: with the implicit GEMM (faster alone)
// on the ResNet-50 stack's first layer, the stack took 32.2-32.8 against
// 30.9 us at batch 1 (hosts BO, BP; 34.1-34.3 either way without dependent
// launch). Likely (not traced) the halo GEMM after it, placed while the
// implicit GEMM held 98 SMs, put two blocks on each free SM. Grids of one
// tile a block (but the narrow GEMM's) now take an SM each
// (SpreadSharedBytes, direct_conv_kernel.h): 30.8-30.9 (host BQ).
// Releasing at each
// block's start instead was slower (2026-11-28: chains of our kernels up
// to 26% slower, the stem 10.2 against 9.4 us at batch 1), likely (not
// measured apart) because the next kernel's blocks were placed while the
// previous one's still held most SMs and crowded onto the few SMs that had
// room (docs/runtime.md, "Dependent launches"). The other kernels of ours
// (depthwise, bias+activation) release at exit; cuDNN's kernels are not
// launched this way.
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
