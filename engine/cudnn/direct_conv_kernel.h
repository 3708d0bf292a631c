// The direct path's kernels (engine/cudnn/direct_conv.h says which problems
// and configurations they run).
#ifndef CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_
#define CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/engine_config_id.h"

namespace convserve {

// A 2-D layer's sizes as the direct kernels index them (32-bit: element
// counts and offsets fit, kDirectMaxElements).
struct DirectConvDims {
  int n, c, h, w;  // input
  int k, p, q;     // output channels, rows and columns
  int r, s;        // kernel
  int stride_h, stride_w, dilation_h, dilation_w, pad_h, pad_w;
};
// `problem`'s, which DirectConvRejection accepted.
DirectConvDims DirectConvDimsOf(const ConvLayerProblem& problem);

// `attribute` of the current device, looked up once per thread, device and
// attribute; `fallback` when the lookup fails.
int CurrentDeviceAttribute(cudaDeviceAttr attribute, int fallback);

// Before launching `kernel` with `threads` threads and `bytes` of dynamic
// shared memory a block on the current device: opts the kernel into all
// the shared memory a block may have there (once per thread, device and
// kernel; never less, so launches from other threads with more stay
// valid) and returns the blocks an SM holds at once (looked up once per
// thread, device, kernel, threads and bytes: host calls a launch from the
// host would otherwise pay each time). RESOURCE_EXHAUSTED when no block
// fits.
absl::StatusOr<int> PrepareKernel(const void* kernel, int threads, int bytes);

// The dynamic shared memory to launch `blocks` blocks (no cluster) of a
// kernel PrepareKernel prepared with `bytes` a block, for `tiles` tiles:
// when every block has one tile at most and they fit on the current device
// one an SM (tiles <= blocks <= SMs), enough that no two share an SM; else
// `bytes`. A dependent launch places its blocks while the kernel before
// still holds SMs: two to an SM, the first ones would crowd onto the few
// free SMs, and with a tile a block those finish last. (Blocks that loop
// over tiles even it out; spread, at batch 32, they were slower.) The halo
// GEMM without a cluster, the pointwise GEMM and the pair use it; the
// narrow GEMM does not (direct_narrow.cu says why).
int SpreadSharedBytes(int bytes, int64_t blocks, int64_t tiles);

// Points `config` at `attrs` holding its launch attributes: a cluster of
// `cluster_z` blocks along grid z when that is over 1, and the dependent
// launch attribute (AddDependentLaunchAttribute).
void SetClusterAndDependentLaunch(unsigned cluster_z, cudaLaunchAttribute (&attrs)[2],
                                  cudaLaunchConfig_t* config);

// INVALID_ARGUMENT when a tensor of `buffers` is missing or not 16-byte
// aligned (as every tensor is declared to cuDNN). The kernels use x, w
// (depthwise weights, K x 1 x R x S: the same bytes in either layout; dense
// ones KRSC, as channels-last layers declare them), bias and y; no
// workspace.
absl::Status CheckDirectConvBuffers(const ConvLayerProblem& problem,
                                    const ConvLayerBuffers& buffers);
// Queues configuration `id` of the direct path for `problem` on `stream`:
// `id` is one of DirectConvConfigs(problem) and `buffers` passed
// CheckDirectConvBuffers. Errors are launch errors.
absl::Status LaunchDirectConv(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream);
// LaunchDirectConv for the implicit GEMM (engine kDirectGemmEngine).
// FAILED_PRECONDITION on a GPU without thread-block clusters.
absl::Status LaunchDirectGemm(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream);

// LaunchDirectConv for the narrow implicit GEMM (engine kDirectNarrowEngine).
// FAILED_PRECONDITION below compute capability 8.0, RESOURCE_EXHAUSTED when
// its shared memory is over the GPU's limit.
absl::Status LaunchDirectNarrow(const ConvLayerProblem& problem, const EngineConfigId& id,
                                const ConvLayerBuffers& buffers, cudaStream_t stream);
// LaunchDirectConv for the pointwise GEMM (engine kDirectPointwiseEngine).
// FAILED_PRECONDITION below compute capability 8.0.
absl::Status LaunchDirectPointwise(const ConvLayerProblem& problem, const EngineConfigId& id,
                                   const ConvLayerBuffers& buffers, cudaStream_t stream);
// LaunchDirectConv for the halo GEMM (engine kDirectHaloEngine).
// FAILED_PRECONDITION below compute capability 8.0.
absl::Status LaunchDirectHalo(const ConvLayerProblem& problem, const EngineConfigId& id,
                              const ConvLayerBuffers& buffers, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_DIRECT_CONV_KERNEL_H_
