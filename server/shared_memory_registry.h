// The shared-memory regions clients registered through Triton's KServe
// extension: system regions (POSIX shared memory objects, mapped here and,
// on a GPU server, page-locked so copies to and from the GPU read and write
// them directly) and CUDA regions (cudaIpcMemHandle_t of a GPU's memory,
// opened here, read and written in place by the plans of that GPU). It hands
// the engine plain host or device pointers (TensorMemory), each holding its
// region: unregistering a region a request uses takes effect for new
// requests at once and unmaps it when the last such request finishes.
// Bounded in count and bytes. Thread-safe.
#ifndef CONVSERVE_SERVER_SHARED_MEMORY_REGISTRY_H_
#define CONVSERVE_SERVER_SHARED_MEMORY_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/infer_call.h"
#include "engine/runtime/request_runner.h"

namespace convserve {

struct SharedMemoryLimits {
  // Regions registered at once (system and CUDA together).
  int max_regions = 64;
  // Bytes of all registered regions together.
  int64_t max_bytes = int64_t{64} << 30;
};

class SharedMemoryRegistry {
 public:
  struct SystemRegion {
    std::string name, key;
    uint64_t offset = 0, byte_size = 0;
  };
  struct CudaRegion {
    std::string name;
    int64_t device = 0;
    uint64_t byte_size = 0;
  };

  // `runner` (which outlives the registry) pins host memory and opens CUDA
  // IPC handles.
  SharedMemoryRegistry(RequestRunner* runner, const SharedMemoryLimits& limits)
      : runner_(runner), limits_(limits) {}
  ~SharedMemoryRegistry();

  // Maps bytes [offset, offset + byte_size) of the POSIX shared memory
  // object `key` (shm_open) under `name`. ALREADY_EXISTS for a taken name;
  // NOT_FOUND when the object does not exist; INVALID_ARGUMENT when the range
  // is empty or past the object's end; RESOURCE_EXHAUSTED past the limits.
  absl::Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                              uint64_t byte_size);
  // Opens the CUDA IPC handle of `byte_size` bytes on GPU `device` under
  // `name`. FAILED_PRECONDITION on a server without a GPU or for a GPU it
  // does not serve; INVALID_ARGUMENT for a handle that does not open.
  absl::Status RegisterCuda(const std::string& name, const std::string& raw_handle,
                            int64_t device, uint64_t byte_size);
  // Removes `name`, or every region of that kind when `name` is empty.
  // NOT_FOUND for an unknown name.
  absl::Status UnregisterSystem(const std::string& name);
  absl::Status UnregisterCuda(const std::string& name);
  // Every region of that kind, or only `name` (NOT_FOUND when unknown).
  absl::StatusOr<std::vector<SystemRegion>> SystemStatus(const std::string& name) const;
  absl::StatusOr<std::vector<CudaRegion>> CudaStatus(const std::string& name) const;

  // Bytes [offset, offset + byte_size) of region `name`, holding the region.
  // NOT_FOUND for an unknown region, INVALID_ARGUMENT past its end.
  absl::StatusOr<TensorMemory> Resolve(const std::string& name, uint64_t offset,
                                       uint64_t byte_size) const;

  // Whether CUDA regions can be registered (the server runs on GPUs).
  bool serves_cuda() const { return runner_->serves_device_memory(); }

 private:
  struct Region;
  absl::Status CheckRoomLocked(const std::string& name, uint64_t byte_size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Unregister(const std::string& name, bool cuda);

  RequestRunner* const runner_;  // outlives the registry (the core owns it)
  const SharedMemoryLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Region>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_SHARED_MEMORY_REGISTRY_H_
