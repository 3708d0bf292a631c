// Host buffers for request and response bytes, reused across requests. On
// a GPU server they are page-locked (cudaHostAlloc), so copies to and from
// the GPU are direct DMA and no per-worker staging copy is needed; on a CPU
// server they are plain memory. Buffers are handed out as TensorMemory whose
// `hold` returns the buffer to the pool when the last holder (the request,
// or gRPC still sending a response slice) lets go. Free buffers are kept by
// power-of-two size class, up to a byte bound. Thread-safe.
#ifndef CONVSERVE_ENGINE_RUNTIME_HOST_BUFFER_POOL_H_
#define CONVSERVE_ENGINE_RUNTIME_HOST_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/infer_call.h"

namespace convserve {

struct HostBufferPoolOptions {
  // Allocates `bytes` (null on failure); frees what it allocated.
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* data)> release;
  // Whether the memory is page-locked for the GPU (TensorMemory::pinned).
  bool pinned = false;
  // Free buffers kept for reuse, in bytes; beyond it they are freed.
  int64_t max_cached_bytes = int64_t{1} << 30;
};

class HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  static std::shared_ptr<HostBufferPool> Create(HostBufferPoolOptions options);
  // Plain memory (malloc).
  static std::shared_ptr<HostBufferPool> CreateUnpinned(int64_t max_cached_bytes = int64_t{1} << 30);
  ~HostBufferPool();

  // A buffer of at least `bytes` (TensorMemory::bytes = `bytes`).
  // RESOURCE_EXHAUSTED when the allocator fails.
  absl::StatusOr<TensorMemory> Get(size_t bytes);

  // Free buffers cached now, in bytes (for tests).
  int64_t cached_bytes() const;

 private:
  explicit HostBufferPool(HostBufferPoolOptions options) : options_(std::move(options)) {}
  void Return(void* data, size_t capacity);

  const HostBufferPoolOptions options_;
  mutable absl::Mutex mu_;
  // Free buffers by capacity (a power of two).
  std::map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  int64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace convserve

#endif  // CONVSERVE_ENGINE_RUNTIME_HOST_BUFFER_POOL_H_
