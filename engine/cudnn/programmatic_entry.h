// Programmatic entry into cuDNN's kernels. convserve's own kernels are
// launched as programmatic dependent launches (dependent_launch.h); cuDNN
// launches its own, so in a captured graph the edge into a cuDNN plan's
// first kernel is a plain one: that kernel is launched only once the kernel
// before it has completed and said so. Many of cuDNN's Hopper kernels wait
// for the kernel before them themselves (griddepcontrol.wait), as ours do,
// but which ones is nowhere documented, so each plan is tested before its
// edge is made programmatic:
//
// TestProgrammaticEntry captures a kernel of ours that lets its dependents
// launch at once, then, long after, checks that the plan has not yet
// written its output or workspace and only then writes the plan's input
// (poisoned until then), followed by the plan entered programmatically.
// A plan whose kernel does not wait reads the poison or writes too early;
// one that waits computes what a plain run computes. Only such a plan is
// admitted (ConvLayerPlan::set_programmatic_entry), and only when
// programmatic entry and dependent launch are on (--programmatic_entry,
// --dependent_launch; ProgrammaticEntryEnabled) and the GPU has compute
// capability 9.0 or newer.
#ifndef CONVSERVE_ENGINE_CUDNN_PROGRAMMATIC_ENTRY_H_
#define CONVSERVE_ENGINE_CUDNN_PROGRAMMATIC_ENTRY_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/conv_layer_plan.h"

namespace convserve {

// The device buffers a launch under test reads and writes: the input
// 16-byte aligned, the output and workspace 4-byte aligned (as cudaMalloc
// and ProbeBuffers give them).
struct EntryTestBuffers {
  void* input = nullptr;
  size_t input_bytes = 0;
  void* output = nullptr;
  size_t output_bytes = 0;
  void* workspace = nullptr;  // may be null
  size_t workspace_bytes = 0;
};

struct EntryVerdict {
  bool admitted = false;
  // Why not, or what was checked.
  std::string detail;
};

// Whether the first kernel `launch` queues on a stream waits for the kernel
// before it (see above). `launch` reads `buffers.input` and writes
// `buffers.output` and the workspace only; it runs three times: twice
// plainly, then captured. Leaves the input as it found it. An error only
// for misaligned buffers or a CUDA failure outside the test (a sticky one,
// say).
using EntryLaunch = std::function<absl::Status(cudaStream_t)>;
absl::StatusOr<EntryVerdict> TestProgrammaticEntry(const EntryLaunch& launch,
                                                   const EntryTestBuffers& buffers,
                                                   cudaStream_t stream);

// TestProgrammaticEntry for a cuDNN path's plan, on scratch buffers of its
// own (ProbeBuffers); sets the plan's programmatic entry from the verdict
// and leaves it unbound. A direct path's plan is refused untested (its
// kernels are dependent launches already), as is every plan when
// programmatic entry is off or the GPU is older than compute capability 9.0.
absl::StatusOr<EntryVerdict> AdmitProgrammaticEntry(ConvLayerPlan& plan,
                                                    const ConvLayerProblem& problem,
                                                    cudnnHandle_t handle, cudaStream_t stream);

// Test hook: a copy of `bytes` from `in` to `out` by a grid of several
// blocks, which, as `kind` says, waits for the kernel before it
// (griddepcontrol.wait) before it touches either, reads all of `in` before
// it waits (at most 131,072 bytes) and writes `out` after, or fills `out`
// with zeros before it waits.
enum class EntryTestCopy { kWaits, kReadsEarly, kWritesEarly };
absl::Status LaunchCopyForTesting(EntryTestCopy kind, const void* in, void* out, size_t bytes,
                                  cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_PROGRAMMATIC_ENTRY_H_
