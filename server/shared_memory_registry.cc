#include "server/shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace convserve {

// One registered region. Unmaps (system) or closes (CUDA) itself when the
// last holder, the registry or a request, lets go.
struct SharedMemoryRegistry::Region {
  bool cuda = false;
  SystemRegion system;
  CudaRegion device;
  // Where the region's first byte is: host or device memory.
  uint8_t* data = nullptr;
  uint64_t byte_size = 0;
  bool pinned = false;
  // System: the mapping (page-aligned), its length.
  void* mapping = nullptr;
  size_t mapping_length = 0;
  // Undoes the pinning (system) or the IPC open (CUDA); released first.
  std::shared_ptr<const void> token;

  ~Region() {
    token.reset();
    if (mapping != nullptr) munmap(mapping, mapping_length);
  }
};

SharedMemoryRegistry::~SharedMemoryRegistry() = default;

absl::Status SharedMemoryRegistry::CheckRoomLocked(const std::string& name,
                                                   uint64_t byte_size) const {
  if (name.empty()) return absl::InvalidArgumentError("a shared memory region needs a name");
  if (regions_.count(name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "a shared memory region named '", name, "' is registered; unregister it first"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region '", name, "': byte_size must be > 0"));
  }
  if (static_cast<int>(regions_.size()) >= limits_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        limits_.max_regions, " shared memory regions are registered, the most allowed "
        "(--max_shared_memory_regions); unregister one first"));
  }
  uint64_t total = byte_size;
  for (const auto& [other, region] : regions_) total += region->byte_size;
  if (total > static_cast<uint64_t>(limits_.max_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "registering ", byte_size, " more bytes would bring shared memory regions to ", total,
        " bytes, over --max_shared_memory_bytes=", limits_.max_bytes));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterSystem(const std::string& name,
                                                  const std::string& key, uint64_t offset,
                                                  uint64_t byte_size) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status room = CheckRoomLocked(name, byte_size); !room.ok()) return room;
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string why = absl::StrCat("shared memory object '", key,
                                         "' does not open (shm_open: ", std::strerror(error), ")");
    if (error == ENOENT) return absl::NotFoundError(why);
    if (error == EACCES) return absl::PermissionDeniedError(why);
    return absl::InvalidArgumentError(why);
  }
  struct stat info;
  const bool sized = fstat(fd, &info) == 0;
  if (!sized || offset > static_cast<uint64_t>(info.st_size) ||
      byte_size > static_cast<uint64_t>(info.st_size) - offset) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory region '", name, "': offset ", offset, " + byte_size ", byte_size,
        " is past the end of '", key, "' (", sized ? info.st_size : -1, " bytes)"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  auto region = std::make_shared<Region>();
  region->system = SystemRegion{name, key, offset, byte_size};
  region->byte_size = byte_size;
  region->mapping_length = offset - start + byte_size;
  region->mapping = mmap(nullptr, region->mapping_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                         static_cast<off_t>(start));
  const int map_error = errno;
  close(fd);
  if (region->mapping == MAP_FAILED) {
    region->mapping = nullptr;
    return absl::InvalidArgumentError(absl::StrCat("shared memory object '", key,
                                                   "' cannot be mapped: ",
                                                   std::strerror(map_error)));
  }
  region->data = static_cast<uint8_t*>(region->mapping) + (offset - start);
  absl::StatusOr<std::shared_ptr<const void>> pinned =
      runner_->PinHostMemory(region->mapping, region->mapping_length);
  if (pinned.ok()) {
    region->token = *std::move(pinned);
    region->pinned = region->token != nullptr;
  } else {
    // Still usable, through the staging copy.
    spdlog::warn("shared memory region '{}' could not be page-locked for the GPU ({}); copies "
                 "go through staging",
                 name, std::string(pinned.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status room = CheckRoomLocked(name, byte_size); !room.ok()) return room;
  regions_[name] = std::move(region);
  spdlog::info("system shared memory region '{}' registered: '{}' offset {}, {} bytes{}", name,
               key, offset, byte_size, regions_[name]->pinned ? ", page-locked" : "");
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& name,
                                                const std::string& raw_handle, int64_t device,
                                                uint64_t byte_size) {
  if (!serves_cuda()) {
    return absl::FailedPreconditionError(
        "CUDA shared memory needs the GPU backend; this server runs on CPU (use system shared "
        "memory)");
  }
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status room = CheckRoomLocked(name, byte_size); !room.ok()) return room;
  }
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device_id must be >= 0, got ", device));
  }
  absl::StatusOr<RequestRunner::DeviceMapping> mapping =
      runner_->OpenCudaIpc(raw_handle, static_cast<int>(device), byte_size);
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat("CUDA shared memory region '", name, "': ",
                                     mapping.status().message()));
  }
  auto region = std::make_shared<Region>();
  region->cuda = true;
  region->device = CudaRegion{name, device, byte_size};
  region->data = mapping->data;
  region->byte_size = byte_size;
  region->token = std::move(mapping->token);
  absl::MutexLock lock(&mu_);
  if (absl::Status room = CheckRoomLocked(name, byte_size); !room.ok()) return room;
  regions_[name] = std::move(region);
  spdlog::info("CUDA shared memory region '{}' registered: GPU {}, {} bytes", name, device,
               byte_size);
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Unregister(const std::string& name, bool cuda) {
  std::vector<std::shared_ptr<const Region>> removed;  // released outside the lock
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->cuda == cuda) {
        removed.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    return absl::OkStatus();
  }
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->cuda != cuda) {
    return absl::NotFoundError(absl::StrCat("no ", cuda ? "CUDA" : "system",
                                            " shared memory region named '", name,
                                            "' is registered"));
  }
  removed.push_back(std::move(it->second));
  regions_.erase(it);
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::UnregisterSystem(const std::string& name) {
  return Unregister(name, false);
}

absl::Status SharedMemoryRegistry::UnregisterCuda(const std::string& name) {
  return Unregister(name, true);
}

absl::StatusOr<std::vector<SharedMemoryRegistry::SystemRegion>> SharedMemoryRegistry::SystemStatus(
    const std::string& name) const {
  std::vector<SystemRegion> regions;
  absl::MutexLock lock(&mu_);
  for (const auto& [region_name, region] : regions_) {
    if (!region->cuda && (name.empty() || name == region_name)) regions.push_back(region->system);
  }
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no system shared memory region named '", name, "' is registered"));
  }
  return regions;
}

absl::StatusOr<std::vector<SharedMemoryRegistry::CudaRegion>> SharedMemoryRegistry::CudaStatus(
    const std::string& name) const {
  std::vector<CudaRegion> regions;
  absl::MutexLock lock(&mu_);
  for (const auto& [region_name, region] : regions_) {
    if (region->cuda && (name.empty() || name == region_name)) regions.push_back(region->device);
  }
  if (!name.empty() && regions.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no CUDA shared memory region named '", name, "' is registered"));
  }
  return regions;
}

absl::StatusOr<TensorMemory> SharedMemoryRegistry::Resolve(const std::string& name,
                                                           uint64_t offset,
                                                           uint64_t byte_size) const {
  std::shared_ptr<const Region> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it == regions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("shared memory region '", name, "' is not registered"));
    }
    region = it->second;
  }
  if (offset > region->byte_size || byte_size > region->byte_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_memory_offset ", offset, " + shared_memory_byte_size ", byte_size,
        " is past the end of region '", name, "' (", region->byte_size, " bytes)"));
  }
  TensorMemory memory;
  memory.kind = region->cuda ? TensorMemory::Kind::kDevice : TensorMemory::Kind::kHost;
  memory.data = region->data + offset;
  memory.bytes = byte_size;
  memory.device = region->cuda ? static_cast<int>(region->device.device) : -1;
  memory.pinned = region->pinned;
  memory.shared_region = true;
  memory.hold = region;
  return memory;
}

}  // namespace convserve
