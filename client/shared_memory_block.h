// Memory convserve-load shares with a server on the same host, as Triton's
// shared-memory extension defines it: a POSIX shared memory object (system)
// or device memory exported by a CUDA IPC handle (CUDA). A block owns its
// memory: the destructor unmaps and unlinks the object, or frees the device
// memory. Read and Write are thread-safe on disjoint ranges.
#ifndef CONVSERVE_CLIENT_SHARED_MEMORY_BLOCK_H_
#define CONVSERVE_CLIENT_SHARED_MEMORY_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/convserve_client.h"

namespace convserve {

class SharedMemoryBlock {
 public:
  virtual ~SharedMemoryBlock() = default;

  virtual uint64_t byte_size() const = 0;
  // Copies `bytes` in at `offset` / `size` bytes out from `offset`.
  virtual absl::Status Write(uint64_t offset, absl::string_view bytes) = 0;
  virtual absl::Status Read(uint64_t offset, uint64_t size, std::string* out) const = 0;

  // Registers the whole block on `server` as region `name`, or removes that
  // region again (SystemSharedMemory* or CudaSharedMemory* calls).
  virtual absl::Status Register(ConvServeClient& server, const std::string& name) const = 0;
  virtual absl::Status Unregister(ConvServeClient& server, const std::string& name) const = 0;

  // Removes the block's name from the system (a system block's /dev/shm
  // entry) while the memory stays usable; nothing for CUDA. Idempotent and
  // safe on any thread, so an interrupted run can call it.
  virtual void Unlink() = 0;
};

// A new POSIX shared memory object `key` ("/name", created exclusively: an
// existing one is ALREADY_EXISTS) of `byte_size` bytes, mapped.
absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> CreateSystemSharedMemory(
    const std::string& key, uint64_t byte_size);

// `byte_size` bytes of device memory on GPU `device` (cudaMalloc) and its
// IPC handle. FAILED_PRECONDITION in a build without CUDA or on a machine
// without that GPU.
absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> CreateCudaSharedMemory(int device,
                                                                          uint64_t byte_size);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_SHARED_MEMORY_BLOCK_H_
