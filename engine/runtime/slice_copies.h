// Copies of many byte ranges within one GPU in one kernel launch: a batch's
// requests whose tensors live in CUDA memory on the serving GPU are gathered
// into the batch's input buffer, and their output slices scattered back, by
// one launch each way instead of one cudaMemcpyAsync per request (each a
// separate operation of a few microseconds on the stream: 0.2 ms each way for
// a batch of 32 on the H100, docs/runtime.md "Dynamic batching").
#ifndef CONVSERVE_ENGINE_RUNTIME_SLICE_COPIES_H_
#define CONVSERVE_ENGINE_RUNTIME_SLICE_COPIES_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace convserve {

// One range: `bytes` from `from` to `to`, both device memory the stream's
// GPU can address (its own allocations or IPC mappings opened on it). Ranges
// must not overlap one another; any alignment.
struct SliceCopy {
  const void* from = nullptr;
  void* to = nullptr;
  size_t bytes = 0;
};

// Queues the copies on `stream` (one launch per 64 ranges); an error is a
// launch error, none of the copies' own.
absl::Status LaunchSliceCopies(const std::vector<SliceCopy>& copies, cudaStream_t stream);

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_SLICE_COPIES_H_
