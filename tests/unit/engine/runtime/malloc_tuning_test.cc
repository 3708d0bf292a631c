// KeepFreedBlocksForReuse: after it, a request thread's three 12.8 MB
// buffers, freed and allocated again, reuse their pages. With glibc's
// defaults the thread's heap is trimmed after each round and every round
// faults in all ~9,400 pages again.
#include "engine/runtime/malloc_tuning.h"

#include <stdlib.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

int64_t MinorFaults() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Faults taken by one round on the calling thread: three 12.8 MB buffers
// (a request's slices, its parsed message, the response), every page
// touched, then freed.
int64_t FaultsOfOneRound() {
  constexpr size_t kBytes = 12'800'000;
  const int64_t before = MinorFaults();
  volatile uint8_t* blocks[3];
  for (volatile uint8_t*& block : blocks) {
    block = static_cast<volatile uint8_t*>(std::malloc(kBytes));
    for (size_t i = 0; i < kBytes; i += 4096) block[i] = static_cast<uint8_t>(i);
  }
  for (volatile uint8_t* block : blocks) std::free(const_cast<uint8_t*>(block));
  return MinorFaults() - before;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CONVSERVE_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CONVSERVE_SANITIZER_ALLOCATOR 1
#endif

TEST(MallocTuningTest, ARequestThreadsFreedBuffersAreReusedWithoutFaults) {
#ifdef CONVSERVE_SANITIZER_ALLOCATOR
  GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc";
#endif
  ASSERT_EQ(std::getenv("GLIBC_TUNABLES"), nullptr) << "run without GLIBC_TUNABLES";
  EXPECT_THAT(KeepFreedBlocksForReuse(), ::testing::HasSubstr("keeps freed blocks"));
  // On a thread of its own, as gRPC's and the workers' are: its own arena.
  std::thread thread([] {
    FaultsOfOneRound();  // the heap grows once
    for (int round = 0; round < 5; ++round) {
      EXPECT_LT(FaultsOfOneRound(), 64) << "round " << round;
    }
  });
  thread.join();
}

TEST(MallocTuningTest, GlibcTunablesWin) {
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1), 0);
  EXPECT_EQ(KeepFreedBlocksForReuse(), "malloc settings from GLIBC_TUNABLES");
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
}

}  // namespace
}  // namespace convserve
