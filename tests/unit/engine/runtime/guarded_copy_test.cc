// CopyGuarded over memory whose pages are taken away (a mapped file
// truncated after mapping, as a client can do to a registered shared-memory
// object): an error instead of a SIGBUS, for reads and writes, on any thread;
// ordinary copies are exact; a SIGBUS outside a guarded copy still kills.
#include "engine/runtime/guarded_copy.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

// A mapping of `bytes` bytes of a memory file, which Truncate cuts to zero.
class TruncatableMapping {
 public:
  explicit TruncatableMapping(size_t bytes) : bytes_(bytes) {
    fd_ = memfd_create("guarded_copy_test", 0);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0);
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    EXPECT_NE(mapped, MAP_FAILED);
    data_ = static_cast<uint8_t*>(mapped);
    std::memset(data_, 0x5A, bytes);
  }
  ~TruncatableMapping() {
    munmap(data_, bytes_);
    close(fd_);
  }
  void Truncate() { ASSERT_EQ(ftruncate(fd_, 0), 0); }
  uint8_t* data() { return data_; }
  size_t size() const { return bytes_; }

 private:
  const size_t bytes_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(random());
  return bytes;
}

TEST(GuardedCopyTest, CopiesOrdinaryMemoryExactly) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4093}, size_t{1} << 20, size_t{1234567}}) {
    const std::vector<uint8_t> source = RandomBytes(n, static_cast<uint32_t>(n));
    std::vector<uint8_t> target(n, 0);
    ASSERT_TRUE(CopyGuarded(target.data(), source.data(), n).ok());
    EXPECT_EQ(target, source) << n << " bytes";
  }
}

TEST(GuardedCopyTest, ReadingATruncatedMappingIsAnErrorAndTheNextCopyWorks) {
  TruncatableMapping mapping(64 << 10);
  std::vector<uint8_t> target(mapping.size());
  ASSERT_TRUE(CopyGuarded(target.data(), mapping.data(), mapping.size()).ok());
  EXPECT_EQ(target[12345], 0x5A);
  mapping.Truncate();
  for (int i = 0; i < 3; ++i) {  // again and again: the handler stays in place
    const absl::Status status = CopyGuarded(target.data(), mapping.data(), mapping.size());
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("truncated after it was registered"));
  }
  const std::vector<uint8_t> source = RandomBytes(999, 3);
  std::vector<uint8_t> copy(999);
  ASSERT_TRUE(CopyGuarded(copy.data(), source.data(), source.size()).ok());
  EXPECT_EQ(copy, source);
}

TEST(GuardedCopyTest, WritingATruncatedMappingIsAnError) {
  TruncatableMapping mapping(3 * 4096 + 17);
  const std::vector<uint8_t> source = RandomBytes(mapping.size(), 4);
  ASSERT_TRUE(CopyGuarded(mapping.data(), source.data(), source.size()).ok());
  EXPECT_EQ(std::memcmp(mapping.data(), source.data(), source.size()), 0);
  mapping.Truncate();
  const absl::Status status = CopyGuarded(mapping.data(), source.data(), source.size());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST(GuardedCopyTest, EachThreadIsGuardedOnItsOwn) {
  TruncatableMapping mapping(256 << 10);
  mapping.Truncate();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0), exact(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<uint8_t> source = RandomBytes(100000 + t, t);
      std::vector<uint8_t> target(source.size());
      for (int i = 0; i < 50; ++i) {
        if (t % 2 == 0) {
          failures[t] += !CopyGuarded(target.data(), mapping.data(), target.size()).ok();
        } else {
          exact[t] += CopyGuarded(target.data(), source.data(), source.size()).ok() &&
                      target == source;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures[0], 50);
  EXPECT_EQ(failures[2], 50);
  EXPECT_EQ(exact[1], 50);
  EXPECT_EQ(exact[3], 50);
}

TEST(GuardedCopyDeathTest, ASigbusOutsideAGuardedCopyStillKills) {
  ASSERT_TRUE(CopyGuarded(nullptr, nullptr, 0).ok());  // the handler is installed
  EXPECT_EXIT(
      {
        TruncatableMapping mapping(8192);
        mapping.Truncate();
        volatile uint8_t value = mapping.data()[100];
        (void)value;
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace convserve
