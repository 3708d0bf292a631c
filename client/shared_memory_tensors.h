// The shared memory of a KServe run with --shared_memory: one region holding
// the input tensor (written once) and one output region cut into slots, one
// per request in flight, so every response's tensor sits in its own slot
// until it is read (or not). Both are registered on every server under names
// unique to this process ("convserve-load-<pid>-<n>-input" / "-output"), and
// unregistered and freed again by the destructor, or by an interrupt
// (signal_cleanup.h). One output region with slots addressed by
// shared_memory_offset, rather than a region per slot, keeps the number of
// regions at two: a server bounds them (64 by default). Thread-safe.
#ifndef CONVSERVE_CLIENT_SHARED_MEMORY_TENSORS_H_
#define CONVSERVE_CLIENT_SHARED_MEMORY_TENSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/convserve_client.h"
#include "client/shared_memory_block.h"

namespace convserve {

enum class SharedMemoryKind {
  kNone,    // tensors in the messages
  kSystem,  // POSIX shared memory
  kCuda,    // device memory by CUDA IPC handle
};

// "none", "system" or "cuda"; INVALID_ARGUMENT names the flag otherwise.
absl::StatusOr<SharedMemoryKind> ParseSharedMemoryKind(const std::string& name);
const char* SharedMemoryKindName(SharedMemoryKind kind);

struct SharedMemoryTensorsOptions {
  // kSystem or kCuda.
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  // kCuda: the GPU whose memory holds the regions.
  int cuda_device = 0;
  // Output slots: the most requests in flight at once.
  int output_slots = 1;
  // Bytes of one response's output tensor (a slot is this, rounded up).
  uint64_t output_bytes = 0;
};

class SharedMemoryTensors {
 public:
  // Creates both regions, writes `input` into the input region and registers
  // them on every server of `servers` (which outlive the object). A failure
  // leaves nothing behind; a server that cannot map the memory (another
  // machine, or a CPU server for CUDA) fails it.
  static absl::StatusOr<std::unique_ptr<SharedMemoryTensors>> Create(
      const SharedMemoryTensorsOptions& options, absl::string_view input,
      std::vector<ConvServeClient*> servers);
  // Unregisters both regions from every server, then frees them.
  ~SharedMemoryTensors();

  SharedMemoryTensors(const SharedMemoryTensors&) = delete;
  SharedMemoryTensors& operator=(const SharedMemoryTensors&) = delete;

  const std::string& input_region() const { return input_name_; }
  uint64_t input_bytes() const { return input_bytes_; }
  const std::string& output_region() const { return output_name_; }
  int slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t slot_offset(int slot) const { return static_cast<uint64_t>(slot) * slot_bytes_; }
  // Copies the first `bytes` bytes of output slot `slot` into `out`.
  absl::Status ReadOutput(int slot, int64_t bytes, std::string* out) const;
  // "system shared memory" or "CUDA shared memory on GPU n".
  std::string description() const;

 private:
  SharedMemoryTensors(SharedMemoryTensorsOptions options, std::string prefix,
                      std::vector<ConvServeClient*> servers, uint64_t input_bytes,
                      uint64_t slot_bytes);

  absl::Status Register(SharedMemoryBlock& block, const std::string& name);
  // The clean-up: unregisters every region registered, unlinks the blocks.
  void Remove();

  const SharedMemoryTensorsOptions options_;
  const std::string input_name_;
  const std::string output_name_;
  const std::vector<ConvServeClient*> servers_;
  const uint64_t input_bytes_;
  const int slots_;
  const uint64_t slot_bytes_;
  std::unique_ptr<SharedMemoryBlock> input_;
  std::unique_ptr<SharedMemoryBlock> output_;
  // The clean-up's id (signal_cleanup.h), once the blocks exist.
  int64_t cleanup_id_ = -1;

  absl::Mutex mu_;
  // (server, region name) pairs registered and not yet unregistered.
  std::vector<std::pair<ConvServeClient*, std::string>> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_SHARED_MEMORY_TENSORS_H_
