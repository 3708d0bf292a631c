#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cudnn/cuda_resources.h"
#include "engine/cudnn/cudnn_status.h"
#include "engine/cudnn/dependent_launch.h"
#include "engine/cudnn/direct_conv_kernel.h"
#include "engine/cudnn/probe_buffers.h"
#include "engine/cudnn/programmatic_entry.h"
#include "engine/status_macros.h"

namespace convserve {
namespace {

constexpr unsigned kPoisonWord = 0xFFFFFFFFu;
constexpr int kLateThreads = 1024;
// How long the input stays poisoned: at least this, and at least
// kDelayRuns plain runs of the launch under test; a launch whose runs take
// longer than kMaxDelayMs allows is refused untested (the late kernel would
// hold the worker's stream that long, and entry gains about a microsecond).
constexpr double kMinDelayMs = 0.2;
constexpr double kDelayRuns = 8;
constexpr double kMaxDelayMs = 20;

__device__ unsigned long long GlobalNanoseconds() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ unsigned CountWritten(const unsigned* words, size_t count) {
  unsigned written = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    written += __ldcv(words + i) != kPoisonWord;
  }
  return written;
}

// One block. Lets the next kernel launch at once, waits `delay_ns`, adds to
// `*written` the words of the output and workspace that no longer hold the
// poison, and only then copies `staged` into `input`.
__global__ void LateInputKernel(const uint8_t* staged, uint8_t* input, size_t input_bytes,
                                const unsigned* output, size_t output_words,
                                const unsigned* workspace, size_t workspace_words,
                                unsigned long long delay_ns, unsigned* written) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  if (threadIdx.x == 0) {
    const unsigned long long start = GlobalNanoseconds();
    while (GlobalNanoseconds() - start < delay_ns) {
    }
  }
  __syncthreads();
  const unsigned seen =
      CountWritten(output, output_words) + CountWritten(workspace, workspace_words);
  if (seen > 0) atomicAdd(written, seen);
  __syncthreads();
  const size_t vectors = input_bytes / sizeof(uint4);
  const uint4* from = reinterpret_cast<const uint4*>(staged);
  uint4* to = reinterpret_cast<uint4*>(input);
  for (size_t i = threadIdx.x; i < vectors; i += blockDim.x) to[i] = from[i];
  for (size_t i = vectors * sizeof(uint4) + threadIdx.x; i < input_bytes; i += blockDim.x) {
    input[i] = staged[i];
  }
}

constexpr int kTestBlocks = 32, kTestThreads = 256, kTestHeld = 16;

template <EntryTestCopy kKind>
__global__ void CopyForTestingKernel(const uint8_t* in, uint8_t* out, size_t bytes) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kKind == EntryTestCopy::kWritesEarly) {
    for (size_t i = first; i < bytes; i += step) out[i] = 0;
  }
  if (kKind == EntryTestCopy::kReadsEarly) {
    // Everything read before the wait, written after it.
    uint8_t held[kTestHeld];
#pragma unroll
    for (int k = 0; k < kTestHeld; ++k) {
      const size_t i = first + k * step;
      held[k] = i < bytes ? in[i] : 0;
    }
    AwaitPreviousKernel();
#pragma unroll
    for (int k = 0; k < kTestHeld; ++k) {
      const size_t i = first + k * step;
      if (i < bytes) out[i] = held[k];
    }
    return;
  }
  AwaitPreviousKernel();
  for (size_t i = first; i < bytes; i += step) out[i] = in[i];
}

struct GraphDeleter {
  void operator()(cudaGraph_t graph) const { cudaGraphDestroy(graph); }
};
struct ExecDeleter {
  void operator()(cudaGraphExec_t exec) const { cudaGraphExecDestroy(exec); }
};

// A failed capture, instantiation or launch refuses the plan; a sticky
// error (the context is lost) is returned instead.
absl::StatusOr<EntryVerdict> Refuse(cudaError_t error, const absl::Status& status,
                                    cudaStream_t stream, const std::string& what) {
  cudaGetLastError();
  const cudaError_t sticky = IsStickyCudaError(error) ? error : StickyCudaError(status, stream);
  if (sticky != cudaSuccess) return CudaError(sticky, what.c_str(), __FILE__, __LINE__);
  cudaGetLastError();
  return EntryVerdict{false, what};
}

std::string Describe(cudaError_t error, const absl::Status& status) {
  if (!status.ok()) return std::string(status.message());
  return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

// Empty when every node after `late` is a kernel entered by a programmatic
// edge; else what is not. Capture takes a programmatic edge into a memset
// too, but only a kernel can wait for the kernel before it.
absl::StatusOr<std::string> EntryNodes(cudaGraphNode_t late) {
  if (late == nullptr) return std::string("the late kernel's node was not found");
  size_t count = 0;
  CUDA_RETURN_IF_ERROR(cudaGraphNodeGetDependentNodes(late, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  std::vector<cudaGraphEdgeData> edges(count);
  CUDA_RETURN_IF_ERROR(
      cudaGraphNodeGetDependentNodes(late, nodes.data(), edges.data(), &count));
  if (count == 0) return std::string("nothing was captured after the late kernel");
  for (size_t i = 0; i < count; ++i) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(nodes[i], &type));
    if (type != cudaGraphNodeTypeKernel) {
      return absl::StrCat("its first node is not a kernel (graph node type ",
                          static_cast<int>(type), ")");
    }
    if (edges[i].type != cudaGraphDependencyTypeProgrammatic) {
      return std::string("its first kernel was not entered by a programmatic edge");
    }
  }
  return std::string();
}

// Runs `launch` plainly on poisoned output and workspace; its output, and
// its time in milliseconds.
absl::Status PlainRun(const EntryLaunch& launch, const EntryTestBuffers& buffers,
                      cudaStream_t stream, std::vector<uint8_t>* output, float* ms) {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buffers.output, 0xFF, buffers.output_bytes, stream));
  if (buffers.workspace_bytes > 0) {
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(buffers.workspace, 0xFF, buffers.workspace_bytes, stream));
  }
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create());
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create());
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
  RETURN_IF_ERROR(launch(stream));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
  output->resize(buffers.output_bytes);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(output->data(), buffers.output, buffers.output_bytes,
                                       cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(ms, start.get(), stop.get()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EntryVerdict> TestProgrammaticEntry(const EntryLaunch& launch,
                                                   const EntryTestBuffers& buffers,
                                                   cudaStream_t stream) {
  const auto aligned = [](const void* p, uintptr_t to) {
    return reinterpret_cast<uintptr_t>(p) % to == 0;
  };
  if (!aligned(buffers.input, 16) || !aligned(buffers.output, 4) ||
      !aligned(buffers.workspace, 4)) {
    return absl::InvalidArgumentError(
        "TestProgrammaticEntry: the input must be 16-byte aligned, the output and workspace "
        "4-byte aligned");
  }
  std::vector<uint8_t> expected, again;
  float first_ms = 0, ms = 0;
  RETURN_IF_ERROR(PlainRun(launch, buffers, stream, &expected, &first_ms));
  RETURN_IF_ERROR(PlainRun(launch, buffers, stream, &again, &ms));
  if (expected != again) {
    return EntryVerdict{false, "two plain runs wrote different outputs, so a run's output "
                               "cannot tell whether it read its input early"};
  }
  // A plan's first run may hold one-time work, which the events around it
  // count (its kernels loaded, or compiled from PTX, while the host queues
  // it: seconds under load): the faster run's time.
  ms = std::min(ms, first_ms);
  const double delay_ms = std::max(kMinDelayMs, kDelayRuns * ms);
  if (delay_ms > kMaxDelayMs) {
    return EntryVerdict{false, absl::StrFormat("a plain run takes %.3f ms, too long to hold its "
                                               "input back %g runs (at most %g ms)",
                                               ms, kDelayRuns, kMaxDelayMs)};
  }

  ASSIGN_OR_RETURN(DeviceBuffer staged, DeviceBuffer::Create(buffers.input_bytes));
  ASSIGN_OR_RETURN(DeviceBuffer written, DeviceBuffer::Create(sizeof(unsigned)));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staged.data(), buffers.input, buffers.input_bytes,
                                       cudaMemcpyDeviceToDevice, stream));

  // The poison is part of the graph, so a capture that fails leaves the
  // buffers as they were.
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaError_t queued = cudaMemsetAsync(written.data(), 0, sizeof(unsigned), stream);
  if (queued == cudaSuccess) {
    queued = cudaMemsetAsync(buffers.input, 0xFF, buffers.input_bytes, stream);
  }
  if (queued == cudaSuccess) {
    queued = cudaMemsetAsync(buffers.output, 0xFF, buffers.output_bytes, stream);
  }
  if (queued == cudaSuccess && buffers.workspace_bytes > 0) {
    queued = cudaMemsetAsync(buffers.workspace, 0xFF, buffers.workspace_bytes, stream);
  }
  LateInputKernel<<<1, kLateThreads, 0, stream>>>(
      static_cast<const uint8_t*>(staged.data()), static_cast<uint8_t*>(buffers.input),
      buffers.input_bytes, static_cast<const unsigned*>(buffers.output),
      buffers.output_bytes / sizeof(unsigned), static_cast<const unsigned*>(buffers.workspace),
      buffers.workspace_bytes / sizeof(unsigned),
      static_cast<unsigned long long>(delay_ms * 1e6), static_cast<unsigned*>(written.data()));
  if (queued == cudaSuccess) queued = cudaGetLastError();
  // The late kernel's node, so its dependents can be looked at once captured.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* last = nullptr;
  size_t count = 0;
  if (queued == cudaSuccess) {
    queued = cudaStreamGetCaptureInfo(stream, &capturing, nullptr, nullptr, &last, nullptr,
                                      &count);
  }
  const cudaGraphNode_t late = count == 1 ? last[0] : nullptr;
  absl::Status launched = queued == cudaSuccess
                              ? absl::OkStatus()
                              : CudaError(queued, "poisoning the buffers", __FILE__, __LINE__);
  if (launched.ok()) launched = EnterNextProgrammatically(stream);
  if (launched.ok()) launched = launch(stream);
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &captured);
  std::unique_ptr<CUgraph_st, GraphDeleter> graph(captured);
  if (!launched.ok() || ended != cudaSuccess) {
    return Refuse(ended, launched, stream,
                  absl::StrCat("not capturable entered programmatically: ",
                               Describe(ended, launched)));
  }
  ASSIGN_OR_RETURN(std::string entry, EntryNodes(late));
  if (!entry.empty()) return EntryVerdict{false, entry};
  cudaGraphExec_t instantiated = nullptr;
  cudaError_t error = cudaGraphInstantiate(&instantiated, graph.get(), 0);
  std::unique_ptr<CUgraphExec_st, ExecDeleter> exec(instantiated);
  if (error == cudaSuccess) error = cudaGraphLaunch(exec.get(), stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) {
    // The input is put back plainly, whatever the graph did.
    cudaGetLastError();
    if (!IsStickyCudaError(error)) {
      cudaMemcpyAsync(buffers.input, staged.data(), buffers.input_bytes,
                      cudaMemcpyDeviceToDevice, stream);
    }
    return Refuse(error, absl::OkStatus(), stream,
                  absl::StrCat("entered programmatically, it failed: ",
                               Describe(error, absl::OkStatus())));
  }
  unsigned early = 0;
  std::vector<uint8_t> output(buffers.output_bytes);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&early, written.data(), sizeof(early), cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(output.data(), buffers.output, buffers.output_bytes,
                                       cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  if (early > 0) {
    return EntryVerdict{false, absl::StrFormat("it wrote %u words of its output or workspace "
                                               "before the kernel before it ended",
                                               early)};
  }
  if (output != expected) {
    return EntryVerdict{false, "its output differs from a plain run's: it read its input "
                               "before the kernel before it ended"};
  }
  return EntryVerdict{true, absl::StrFormat("waited for a kernel that ran %.3f ms", delay_ms)};
}

absl::StatusOr<EntryVerdict> AdmitProgrammaticEntry(ConvLayerPlan& plan,
                                                    const ConvLayerProblem& problem,
                                                    cudnnHandle_t handle, cudaStream_t stream) {
  plan.set_programmatic_entry(false);
  if (plan.path() == LayerPath::kDirect) {
    return EntryVerdict{false, "the direct path's kernels are dependent launches already"};
  }
  if (!ProgrammaticEntryEnabled()) {
    return EntryVerdict{false, "programmatic entry or dependent launch is off"};
  }
  if (CurrentDeviceAttribute(cudaDevAttrComputeCapabilityMajor, 0) < 9) {
    return EntryVerdict{false, "the GPU is older than compute capability 9.0"};
  }
  ASSIGN_OR_RETURN(ProbeBuffers probe, ProbeBuffers::Create(problem, stream, /*seed=*/1));
  RETURN_IF_ERROR(probe.ReserveWorkspace(plan.workspace_bytes()));
  RETURN_IF_ERROR(probe.Reset());
  const ConvLayerBuffers bound = probe.buffers();
  RETURN_IF_ERROR(plan.Bind(problem, bound));
  EntryTestBuffers buffers;
  buffers.input = const_cast<void*>(bound.x);
  buffers.input_bytes = NumElements(problem.input) * DTypeSize(problem.dtype);
  buffers.output = bound.y;
  buffers.output_bytes = NumElements(problem.output) * DTypeSize(problem.dtype);
  buffers.workspace = bound.workspace;
  buffers.workspace_bytes = plan.workspace_bytes();
  absl::StatusOr<EntryVerdict> verdict = TestProgrammaticEntry(
      [&](cudaStream_t s) { return plan.RunBound(handle, s, problem); }, buffers, stream);
  plan.Unbind();
  if (verdict.ok()) plan.set_programmatic_entry(verdict->admitted);
  return verdict;
}

absl::Status LaunchCopyForTesting(EntryTestCopy kind, const void* in, void* out, size_t bytes,
                                  cudaStream_t stream) {
  const auto* from = static_cast<const uint8_t*>(in);
  auto* to = static_cast<uint8_t*>(out);
  constexpr int kBlocks = kTestBlocks, kThreads = kTestThreads;
  if (kind == EntryTestCopy::kReadsEarly && bytes > size_t{kBlocks} * kThreads * kTestHeld) {
    return absl::InvalidArgumentError("LaunchCopyForTesting: too many bytes to read early");
  }
  switch (kind) {
    case EntryTestCopy::kWaits:
      CopyForTestingKernel<EntryTestCopy::kWaits>
          <<<kBlocks, kThreads, 0, stream>>>(from, to, bytes);
      break;
    case EntryTestCopy::kReadsEarly:
      CopyForTestingKernel<EntryTestCopy::kReadsEarly>
          <<<kBlocks, kThreads, 0, stream>>>(from, to, bytes);
      break;
    case EntryTestCopy::kWritesEarly:
      CopyForTestingKernel<EntryTestCopy::kWritesEarly>
          <<<kBlocks, kThreads, 0, stream>>>(from, to, bytes);
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace convserve
