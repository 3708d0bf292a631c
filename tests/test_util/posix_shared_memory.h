// A POSIX shared memory object made the way a Triton/KServe client makes one
// before registering it as a system shared-memory region: shm_open under a
// name unique to this process, ftruncate, mmap. The test reads and writes it
// through its own mapping; the server maps the same object by its key. Not
// thread-safe (the server writes into it while a request runs: read it after
// the answer).
#ifndef CONVSERVE_TESTS_TEST_UTIL_POSIX_SHARED_MEMORY_H_
#define CONVSERVE_TESTS_TEST_UTIL_POSIX_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace convserve {

class PosixSharedMemory {
 public:
  // A new object of `bytes` bytes, zero-filled, named
  // "/convserve_test_<pid>_<n>_<tag>".
  static absl::StatusOr<std::unique_ptr<PosixSharedMemory>> Create(const std::string& tag,
                                                                    size_t bytes);
  // Unmaps and unlinks the object (mappings the server still holds stay
  // valid until it lets go).
  ~PosixSharedMemory();
  PosixSharedMemory(const PosixSharedMemory&) = delete;
  PosixSharedMemory& operator=(const PosixSharedMemory&) = delete;

  // The shm_open name, with its leading '/': the key a client registers.
  const std::string& key() const { return key_; }
  size_t size() const { return size_; }

  // Copies `bytes` in at `offset`; `fill` sets every byte of a range.
  void Write(size_t offset, const std::string& bytes);
  void Fill(size_t offset, size_t bytes, uint8_t value);
  std::string Read(size_t offset, size_t bytes) const;

  // How many mappings of this object the process holds now, from
  // /proc/self/maps: 1 (the test's) plus those of an in-process server.
  int MappingsInProcess() const;

 private:
  PosixSharedMemory(std::string key, uint8_t* data, size_t size)
      : key_(std::move(key)), data_(data), size_(size) {}

  const std::string key_;
  uint8_t* const data_;
  const size_t size_;
};

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_POSIX_SHARED_MEMORY_H_
