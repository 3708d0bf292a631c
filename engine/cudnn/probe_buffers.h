// Scratch tensors for running an engine candidate nobody has run before:
// fresh random inputs (never zeros), an output poisoned before each run, and
// every buffer between guard zones. Check() then tells whether the candidate
// wrote outside its output or workspace (a write that would silently corrupt
// a neighbour in the serving process, or fault there), changed its inputs,
// and wrote every output element with a finite value. Reset() restores
// everything before the next candidate, so one candidate's stray writes are
// never blamed on the next. Not thread-safe; used by one search on one
// stream.
#ifndef CONVSERVE_ENGINE_CUDNN_PROBE_BUFFERS_H_
#define CONVSERVE_ENGINE_CUDNN_PROBE_BUFFERS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/conv_layer_problem.h"
#include "engine/cudnn/conv_layer_plan.h"
#include "engine/cudnn/cuda_resources.h"

namespace convserve {

class ProbeBuffers {
 public:
  // Allocates and fills the layer's x, w and bias (uniform in [-1, 1],
  // weights scaled by 1/sqrt(fan-in) so 16-bit outputs stay finite), and
  // the narrow GEMM's packed weights where it runs the layer, on the
  // current device.
  static absl::StatusOr<ProbeBuffers> Create(const ConvLayerProblem& problem,
                                             cudaStream_t stream, uint64_t seed);

  ProbeBuffers(ProbeBuffers&&) noexcept = default;
  ProbeBuffers& operator=(ProbeBuffers&&) noexcept = default;

  // Makes the workspace at least `bytes` (guarded like the rest).
  absl::Status ReserveWorkspace(int64_t bytes);
  ConvLayerBuffers buffers() const;

  // Before each candidate: every guard zone and unused byte back to the
  // guard pattern, x, w and bias back to their values, and y filled with a
  // bit pattern no kernel computes (all ones: a NaN in every dtype), so an
  // element left unwritten is seen.
  absl::Status Reset();
  // OK when every guard byte is intact, x, w and bias hold their values and
  // (with `check_output`) every element of y was written with a finite
  // value; else FAILED_PRECONDITION saying which buffer and where.
  // Synchronizes the stream.
  absl::Status Check(bool check_output);

 private:
  // One allocation: [guard][data: `bytes` in use, `capacity` in all][guard].
  // Everything but the bytes in use holds the guard pattern.
  struct Guarded {
    DeviceBuffer block;
    size_t guard = 0;
    size_t capacity = 0;
    size_t bytes = 0;
    void* data() const { return static_cast<char*>(block.data()) + guard; }
  };
  // How an input is filled: uniform in [-scale, scale] from `seed`.
  struct Fill {
    int64_t count = 0;
    uint64_t seed = 0;
    float scale = 1;
  };
  ProbeBuffers(const ConvLayerProblem& problem, cudaStream_t stream)
      : problem_(problem), stream_(stream) {}
  absl::StatusOr<Guarded> Allocate(size_t bytes);
  absl::Status CheckGuards(const Guarded& buffer, const char* name, bool* ok,
                           std::string* report);
  absl::Status CheckInput(const Guarded& buffer, const Fill& fill, const char* name, bool* ok,
                          std::string* report);
  absl::Status ResetBlock(const Guarded& buffer);

  ConvLayerProblem problem_;
  cudaStream_t stream_;
  Fill x_fill_, w_fill_, bias_fill_, narrow_fill_;
  // narrow_w_: the narrow GEMM's packed weights where it runs the layer
  // (DirectNarrowPackedBytes), random like w_ (values do not matter);
  // unallocated elsewhere.
  Guarded x_, w_, bias_, y_, workspace_, narrow_w_;
  DeviceBuffer results_;  // counters the check kernels write
};

// Test hook: a kernel that makes a 16-byte store to a misaligned address,
// which kills the CUDA context of the process with cudaErrorMisalignedAddress
// (the fault issue #10 saw from a cuDNN kernel). `device_memory` must be a
// device allocation of at least 32 bytes.
absl::Status LaunchMisalignedWriteForTesting(void* device_memory, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_CUDNN_PROBE_BUFFERS_H_
