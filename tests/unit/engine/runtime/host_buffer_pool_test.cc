// HostBufferPool: buffers are reused by size class, returned only when the
// last holder lets go, and cached only up to the byte bound.
#include "engine/runtime/host_buffer_pool.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace convserve {
namespace {

struct CountingAllocator {
  int allocated = 0;
  int released = 0;
  HostBufferPoolOptions Options(int64_t max_cached_bytes) {
    HostBufferPoolOptions options;
    options.allocate = [this](size_t bytes) {
      ++allocated;
      return std::malloc(bytes);
    };
    options.release = [this](void* data) {
      ++released;
      std::free(data);
    };
    options.max_cached_bytes = max_cached_bytes;
    return options;
  }
};

TEST(HostBufferPoolTest, ReturnedBufferIsReusedForTheSameSizeClass) {
  CountingAllocator counter;
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::Create(counter.Options(1 << 20));
  void* first = nullptr;
  {
    absl::StatusOr<TensorMemory> a = pool->Get(5000);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->bytes, 5000u);
    std::memset(a->data, 1, a->bytes);  // the whole of it is usable
    first = a->data;
  }
  EXPECT_EQ(pool->cached_bytes(), 8192);
  absl::StatusOr<TensorMemory> b = pool->Get(8000);  // same class (8 KiB)
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data, first);
  EXPECT_EQ(counter.allocated, 1);
  absl::StatusOr<TensorMemory> c = pool->Get(9000);  // next class
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->data, first);
  EXPECT_EQ(counter.allocated, 2);
}

TEST(HostBufferPoolTest, BufferReturnsOnlyWhenTheLastHolderLetsGo) {
  CountingAllocator counter;
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::Create(counter.Options(1 << 20));
  std::shared_ptr<const void> second_holder;
  {
    absl::StatusOr<TensorMemory> a = pool->Get(100);
    ASSERT_TRUE(a.ok());
    second_holder = a->hold;  // e.g. gRPC still sending a response slice
  }
  EXPECT_EQ(pool->cached_bytes(), 0);
  second_holder.reset();
  EXPECT_EQ(pool->cached_bytes(), 4096);
}

TEST(HostBufferPoolTest, CacheStaysWithinItsByteBound) {
  CountingAllocator counter;
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::Create(counter.Options(3 * 4096));
  {
    std::vector<TensorMemory> held;
    for (int i = 0; i < 5; ++i) held.push_back(*pool->Get(4096));
  }
  EXPECT_EQ(pool->cached_bytes(), 3 * 4096);
  EXPECT_EQ(counter.released, 2);
}

TEST(HostBufferPoolTest, BuffersOutliveThePoolsLastOtherOwner) {
  CountingAllocator counter;
  std::shared_ptr<HostBufferPool> pool = HostBufferPool::Create(counter.Options(1 << 20));
  absl::StatusOr<TensorMemory> a = pool->Get(64);
  ASSERT_TRUE(a.ok());
  pool.reset();  // the runner went away; a response slice still holds a buffer
  std::memset(a->data, 7, 64);
  a->hold.reset();
  EXPECT_EQ(counter.released, 1);  // freed with the pool, after the holder
}

TEST(HostBufferPoolTest, AllocationFailureIsResourceExhausted) {
  HostBufferPoolOptions options;
  options.allocate = [](size_t) -> void* { return nullptr; };
  options.release = [](void*) {};
  absl::StatusOr<TensorMemory> a = HostBufferPool::Create(options)->Get(10);
  EXPECT_TRUE(absl::IsResourceExhausted(a.status())) << a.status();
}

}  // namespace
}  // namespace convserve
