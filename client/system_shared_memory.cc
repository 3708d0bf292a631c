// System shared memory: a POSIX shared memory object, created here and
// mapped; the server maps the same object by its key.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/shared_memory_block.h"

namespace convserve {
namespace {

absl::Status Errno(const std::string& what, int error) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  if (error == EEXIST) return absl::AlreadyExistsError(message);
  if (error == EACCES) return absl::PermissionDeniedError(message);
  if (error == ENOMEM || error == ENOSPC || error == EFBIG) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

class SystemSharedMemory final : public SharedMemoryBlock {
 public:
  SystemSharedMemory(std::string key, void* data, uint64_t byte_size)
      : key_(std::move(key)), data_(static_cast<char*>(data)), byte_size_(byte_size) {}
  ~SystemSharedMemory() override {
    munmap(data_, byte_size_);
    Unlink();
  }

  uint64_t byte_size() const override { return byte_size_; }

  absl::Status Write(uint64_t offset, absl::string_view bytes) override {
    if (offset > byte_size_ || bytes.size() > byte_size_ - offset) {
      return OutOfRange(offset, bytes.size());
    }
    std::memcpy(data_ + offset, bytes.data(), bytes.size());
    return absl::OkStatus();
  }

  absl::Status Read(uint64_t offset, uint64_t size, std::string* out) const override {
    if (offset > byte_size_ || size > byte_size_ - offset) return OutOfRange(offset, size);
    out->assign(data_ + offset, size);
    return absl::OkStatus();
  }

  absl::Status Register(ConvServeClient& server, const std::string& name) const override {
    return server.SystemSharedMemoryRegister(name, key_, 0, byte_size_);
  }
  absl::Status Unregister(ConvServeClient& server, const std::string& name) const override {
    return server.SystemSharedMemoryUnregister(name);
  }

  void Unlink() override {
    if (!unlinked_.exchange(true)) shm_unlink(key_.c_str());
  }

 private:
  absl::Status OutOfRange(uint64_t offset, uint64_t size) const {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + size,
                                              ") are past the end of '", key_, "' (",
                                              byte_size_, " bytes)"));
  }

  const std::string key_;
  char* const data_;
  const uint64_t byte_size_;
  std::atomic<bool> unlinked_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryBlock>> CreateSystemSharedMemory(
    const std::string& key, uint64_t byte_size) {
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open('", key, "')"), errno);
  // From here on the name exists: every failure removes it again. The pages
  // are allocated now, so a full /dev/shm (64 MB in a default container) is
  // an error here rather than a SIGBUS at the first write.
  const int allocated = posix_fallocate(fd, 0, static_cast<off_t>(byte_size));
  if (allocated != 0) {
    close(fd);
    shm_unlink(key.c_str());
    return Errno(absl::StrCat("allocating ", byte_size, " bytes for '", key,
                              "' (posix_fallocate; is /dev/shm big enough?)"),
                 allocated);
  }
  void* data = mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(key.c_str());
    return Errno(absl::StrCat("mmap('", key, "', ", byte_size, " bytes)"), error);
  }
  return std::unique_ptr<SharedMemoryBlock>(new SystemSharedMemory(key, data, byte_size));
}

}  // namespace convserve
