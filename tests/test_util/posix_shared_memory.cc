#include "tests/test_util/posix_shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace convserve {
namespace {

// A range outside the object is a mistake in the test itself.
void CheckRange(const std::string& key, size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset) {
    std::fprintf(stderr, "PosixSharedMemory %s: range [%zu, +%zu) is outside its %zu bytes\n",
                 key.c_str(), offset, bytes, size);
    std::abort();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PosixSharedMemory>> PosixSharedMemory::Create(
    const std::string& tag, size_t bytes) {
  static std::atomic<int> next{0};
  const std::string key =
      absl::StrCat("/convserve_test_", getpid(), "_", next.fetch_add(1), "_", tag);
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("shm_open(", key, "): ", std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    shm_unlink(key.c_str());
    return absl::InternalError(absl::StrCat("ftruncate(", key, ", ", bytes,
                                            "): ", std::strerror(error)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(key.c_str());
    return absl::InternalError(absl::StrCat("mmap(", key, "): ", std::strerror(error)));
  }
  return std::unique_ptr<PosixSharedMemory>(
      new PosixSharedMemory(key, static_cast<uint8_t*>(data), bytes));
}

PosixSharedMemory::~PosixSharedMemory() {
  munmap(data_, size_);
  shm_unlink(key_.c_str());
}

void PosixSharedMemory::Write(size_t offset, const std::string& bytes) {
  CheckRange(key_, offset, bytes.size(), size_);
  std::memcpy(data_ + offset, bytes.data(), bytes.size());
}

void PosixSharedMemory::Fill(size_t offset, size_t bytes, uint8_t value) {
  CheckRange(key_, offset, bytes, size_);
  std::memset(data_ + offset, value, bytes);
}

std::string PosixSharedMemory::Read(size_t offset, size_t bytes) const {
  CheckRange(key_, offset, bytes, size_);
  return std::string(reinterpret_cast<const char*>(data_) + offset, bytes);
}

int PosixSharedMemory::MappingsInProcess() const {
  // Linux backs POSIX shared memory with files under /dev/shm.
  const std::string path = absl::StrCat("/dev/shm", key_);
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (absl::EndsWith(line, path) || absl::StrContains(line, path + " ")) ++count;
  }
  return count;
}

}  // namespace convserve
