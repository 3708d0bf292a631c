#include "client/shared_memory_tensors.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/signal_cleanup.h"

namespace convserve {
namespace {

// Slots start on page boundaries: a GPU server's kernels and copies want
// aligned addresses, and pages never straddle two requests' outputs.
constexpr uint64_t kSlotAlignment = 4096;

// Tells regions of several runs in one process apart (tests run many).
std::atomic<int> next_run{0};

}  // namespace

absl::StatusOr<SharedMemoryKind> ParseSharedMemoryKind(const std::string& name) {
  if (name == "none") return SharedMemoryKind::kNone;
  if (name == "system") return SharedMemoryKind::kSystem;
  if (name == "cuda") return SharedMemoryKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("--shared_memory='", name, "': must be none, system or cuda"));
}

const char* SharedMemoryKindName(SharedMemoryKind kind) {
  switch (kind) {
    case SharedMemoryKind::kSystem:
      return "system";
    case SharedMemoryKind::kCuda:
      return "cuda";
    case SharedMemoryKind::kNone:
      break;
  }
  return "none";
}

SharedMemoryTensors::SharedMemoryTensors(SharedMemoryTensorsOptions options, std::string prefix,
                                         std::vector<ConvServeClient*> servers,
                                         uint64_t input_bytes, uint64_t slot_bytes)
    : options_(options),
      input_name_(prefix + "-input"),
      output_name_(prefix + "-output"),
      servers_(std::move(servers)),
      input_bytes_(input_bytes),
      slots_(options.output_slots),
      slot_bytes_(slot_bytes) {}

absl::StatusOr<std::unique_ptr<SharedMemoryTensors>> SharedMemoryTensors::Create(
    const SharedMemoryTensorsOptions& options, absl::string_view input,
    std::vector<ConvServeClient*> servers) {
  if (options.kind == SharedMemoryKind::kNone) {
    return absl::InvalidArgumentError("SharedMemoryTensors needs system or cuda");
  }
  if (options.output_slots < 1) {
    return absl::InvalidArgumentError("shared memory needs at least one output slot");
  }
  const uint64_t slot_bytes =
      (std::max<uint64_t>(options.output_bytes, 1) + kSlotAlignment - 1) / kSlotAlignment *
      kSlotAlignment;
  const std::string prefix = absl::StrCat("convserve-load-", getpid(), "-", next_run++);
  std::unique_ptr<SharedMemoryTensors> tensors(new SharedMemoryTensors(
      options, prefix, std::move(servers), std::max<uint64_t>(input.size(), 1), slot_bytes));
  SharedMemoryTensors* raw = tensors.get();  // lives until the destructor runs the clean-up
  tensors->cleanup_id_ = AddCleanup([raw] { raw->Remove(); });

  const auto create = [&](const std::string& name,
                          uint64_t bytes) -> absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> {
    if (options.kind == SharedMemoryKind::kSystem) return CreateSystemSharedMemory("/" + name, bytes);
    return CreateCudaSharedMemory(options.cuda_device, bytes);
  };
  absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> input_block =
      create(tensors->input_name_, tensors->input_bytes_);
  if (!input_block.ok()) return input_block.status();
  {
    absl::MutexLock lock(&tensors->mu_);
    tensors->input_ = *std::move(input_block);
  }
  absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> output_block =
      create(tensors->output_name_, slot_bytes * static_cast<uint64_t>(options.output_slots));
  if (!output_block.ok()) return output_block.status();
  {
    absl::MutexLock lock(&tensors->mu_);
    tensors->output_ = *std::move(output_block);
  }
  absl::Status written = tensors->input_->Write(0, input);
  if (!written.ok()) return written;
  absl::Status registered = tensors->Register(*tensors->input_, tensors->input_name_);
  if (!registered.ok()) return registered;
  registered = tensors->Register(*tensors->output_, tensors->output_name_);
  if (!registered.ok()) return registered;
  return tensors;
}

SharedMemoryTensors::~SharedMemoryTensors() {
  if (cleanup_id_ >= 0) RunCleanup(cleanup_id_);
}

absl::Status SharedMemoryTensors::Register(SharedMemoryBlock& block, const std::string& name) {
  for (ConvServeClient* server : servers_) {
    absl::Status status = block.Register(*server, name);
    if (!status.ok()) {
      const bool system = options_.kind == SharedMemoryKind::kSystem;
      return absl::Status(
          status.code(),
          absl::StrCat(system ? "SystemSharedMemoryRegister" : "CudaSharedMemoryRegister", " of '",
                       name, "' on ", server->options().address, ": ", status.message(),
                       system && absl::IsNotFound(status)
                           ? " (system shared memory needs the server on this machine)"
                           : ""));
    }
    absl::MutexLock lock(&mu_);
    registered_.emplace_back(server, name);
  }
  return absl::OkStatus();
}

void SharedMemoryTensors::Remove() {
  absl::MutexLock lock(&mu_);
  for (const auto& [server, name] : registered_) {
    SharedMemoryBlock& block = name == input_name_ ? *input_ : *output_;
    absl::Status status = block.Unregister(*server, name);
    if (!status.ok() && !absl::IsNotFound(status)) {
      std::fprintf(stderr,
                   "convserve-load: could not unregister shared memory region '%s' on %s: %s\n",
                   name.c_str(), server->options().address.c_str(), status.ToString().c_str());
    }
  }
  registered_.clear();
  if (input_ != nullptr) input_->Unlink();
  if (output_ != nullptr) output_->Unlink();
}

absl::Status SharedMemoryTensors::ReadOutput(int slot, int64_t bytes, std::string* out) const {
  if (slot < 0 || slot >= slots_ || bytes < 0 || static_cast<uint64_t>(bytes) > slot_bytes_) {
    return absl::OutOfRangeError(absl::StrCat("output slot ", slot, ": ", bytes,
                                              " bytes do not fit its ", slot_bytes_));
  }
  return output_->Read(slot_offset(slot), static_cast<uint64_t>(bytes), out);
}

std::string SharedMemoryTensors::description() const {
  if (options_.kind == SharedMemoryKind::kCuda) {
    return absl::StrCat("CUDA shared memory on GPU ", options_.cuda_device);
  }
  return "system shared memory";
}

}  // namespace convserve
