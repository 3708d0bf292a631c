// PlanCache with a fake plan builder: no GPU needed.
#include "engine/runtime/plan_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

struct FakePlan {
  std::string name;
};
using Cache = PlanCache<FakePlan>;

PlanKey Key(const std::string& graph, int layer = 0) {
  PlanKey key;
  key.graph_id = graph;
  key.layer = layer;
  key.input_shape = {1, 3, 8, 8};
  key.policy = "test";
  return key;
}

Cache::Builder Returns(const std::string& name, int64_t bytes = 1,
                       std::atomic<int>* calls = nullptr) {
  return [=]() -> absl::StatusOr<Cache::Built> {
    if (calls != nullptr) ++*calls;
    return Cache::Built{std::make_shared<FakePlan>(FakePlan{name}), bytes};
  };
}

// Waits (bounded) until `done()` holds; false on time-out.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(PlanCacheTest, ConcurrentMissesBuildOnce) {
  for (int repetition = 0; repetition < 20; ++repetition) {
    Cache cache({});
    constexpr int kThreads = 16;
    std::atomic<int> builds{0};
    absl::Notification release;
    const Cache::Builder slow_build = [&]() -> absl::StatusOr<Cache::Built> {
      ++builds;
      release.WaitForNotification();
      return Cache::Built{std::make_shared<FakePlan>(FakePlan{"plan"}), 1};
    };
    absl::Barrier start(kThreads);
    std::vector<std::shared_ptr<FakePlan>> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.Block();
        results[t] = *cache.GetOrBuild(Key("g"), slow_build);
      });
    }
    // Every caller is inside GetOrBuild (one building, the rest waiting)
    // before the build may finish.
    ASSERT_TRUE(Eventually([&] {
      const PlanCacheStats s = cache.stats();
      return s.misses + s.waits == kThreads;
    }));
    release.Notify();
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(builds.load(), 1);
    for (const auto& r : results) EXPECT_EQ(r, results[0]);
    EXPECT_EQ(cache.stats().builds_ok, 1);
  }
}

TEST(PlanCacheTest, DifferentKeysBuildInParallel) {
  Cache cache({});
  absl::Notification b_started;
  bool a_saw_b = false;
  std::thread a([&] {
    ASSERT_TRUE(cache
                    .GetOrBuild(Key("a"),
                                [&]() -> absl::StatusOr<Cache::Built> {
                                  // Only returns once B's build runs at the same time.
                                  a_saw_b = b_started.WaitForNotificationWithTimeout(
                                      absl::Seconds(10));
                                  return Cache::Built{std::make_shared<FakePlan>(), 1};
                                })
                    .ok());
  });
  std::thread b([&] {
    ASSERT_TRUE(cache
                    .GetOrBuild(Key("b"),
                                [&]() -> absl::StatusOr<Cache::Built> {
                                  b_started.Notify();
                                  return Cache::Built{std::make_shared<FakePlan>(), 1};
                                })
                    .ok());
  });
  a.join();
  b.join();
  EXPECT_TRUE(a_saw_b);
}

TEST(PlanCacheTest, BuildDoesNotBlockLookupsOfOtherKeys) {
  Cache cache({});
  ASSERT_TRUE(cache.GetOrBuild(Key("ready"), Returns("ready")).ok());
  absl::Notification building, release;
  std::thread slow([&] {
    ASSERT_TRUE(cache
                    .GetOrBuild(Key("slow"),
                                [&]() -> absl::StatusOr<Cache::Built> {
                                  building.Notify();
                                  release.WaitForNotification();
                                  return Cache::Built{std::make_shared<FakePlan>(), 1};
                                })
                    .ok());
  });
  building.WaitForNotification();
  // While "slow" builds: a hit and a whole other miss both complete.
  absl::StatusOr<std::shared_ptr<FakePlan>> hit = cache.GetOrBuild(Key("ready"), Returns("x"));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ((*hit)->name, "ready");
  EXPECT_TRUE(cache.GetOrBuild(Key("other"), Returns("other")).ok());
  release.Notify();
  slow.join();
}

TEST(PlanCacheTest, EvictsLeastRecentlyUsedFirst) {
  PlanCacheOptions options;
  options.max_entries = 2;
  Cache cache(options);
  std::atomic<int> calls{0};
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a", 1, &calls)).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("b"), Returns("b", 1, &calls)).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a", 1, &calls)).ok());  // a is now newest
  ASSERT_TRUE(cache.GetOrBuild(Key("c"), Returns("c", 1, &calls)).ok());  // evicts b
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 3) << "a was evicted instead of b";
  ASSERT_TRUE(cache.GetOrBuild(Key("b"), Returns("b", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 4) << "b was kept although least recently used";
}

TEST(PlanCacheTest, StaysWithinByteBound) {
  PlanCacheOptions options;
  options.max_bytes = 100;
  Cache cache(options);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(cache.GetOrBuild(Key("g", i), Returns("p", 40)).ok());
    EXPECT_LE(cache.stats().bytes, 100);
  }
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().bytes, 80);
  EXPECT_EQ(cache.stats().evictions, 8);
}

TEST(PlanCacheTest, DoesNotEvictAPlanInUse) {
  PlanCacheOptions options;
  options.max_entries = 1;
  Cache cache(options);
  std::atomic<int> calls{0};
  absl::StatusOr<std::shared_ptr<FakePlan>> held = cache.GetOrBuild(Key("a"), Returns("a", 1, &calls));
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("b"), Returns("b", 1, &calls)).ok());
  // a is held, so b (not held) went instead, and a is still a hit.
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 2);
  held->reset();
  ASSERT_TRUE(cache.GetOrBuild(Key("c"), Returns("c", 1, &calls)).ok());
  EXPECT_EQ(cache.stats().entries, 1);
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 4) << "a should have been evicted once released";
}

TEST(PlanCacheTest, FailureReachesEveryWaiterAndExpires) {
  absl::Time now = absl::FromUnixSeconds(1000);
  PlanCacheOptions options;
  options.failure_ttl = absl::Seconds(5);
  options.now = [&now] { return now; };
  Cache cache(options);
  std::atomic<int> builds{0};
  absl::Notification release;
  const Cache::Builder failing = [&]() -> absl::StatusOr<Cache::Built> {
    ++builds;
    release.WaitForNotification();
    return absl::UnimplementedError("no engine for this shape");
  };
  constexpr int kThreads = 8;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { results[t] = cache.GetOrBuild(Key("bad"), failing).status(); });
  }
  ASSERT_TRUE(Eventually([&] {
    const PlanCacheStats s = cache.stats();
    return s.misses + s.waits == kThreads;
  }));
  release.Notify();
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(s.message(), "no engine for this shape");
  }
  EXPECT_EQ(builds.load(), 1);
  // Within the TTL the failure is served without a build...
  now += absl::Seconds(4);
  EXPECT_EQ(cache.GetOrBuild(Key("bad"), failing).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(cache.stats().failures_served, 1);
  // ...and after it, the key is built again.
  now += absl::Seconds(2);
  EXPECT_TRUE(cache.GetOrBuild(Key("bad"), Returns("fixed")).ok());
  EXPECT_EQ(cache.stats().builds_ok, 1);
}

TEST(PlanCacheTest, EraseIfDropsMatchingKeys) {
  Cache cache({});
  std::atomic<int> calls{0};
  ASSERT_TRUE(cache.GetOrBuild(Key("keep"), Returns("k", 1, &calls)).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("drop", 0), Returns("d", 1, &calls)).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("drop", 1), Returns("d", 1, &calls)).ok());
  cache.EraseIf([](const PlanKey& key) { return key.graph_id == "drop"; });
  EXPECT_EQ(cache.stats().entries, 1);
  ASSERT_TRUE(cache.GetOrBuild(Key("keep"), Returns("k", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 3);
  ASSERT_TRUE(cache.GetOrBuild(Key("drop", 0), Returns("d", 1, &calls)).ok());
  EXPECT_EQ(calls.load(), 4);
}

TEST(PlanCacheTest, GenerationChangesExactlyWhenAValueLeaves) {
  absl::Time now = absl::FromUnixSeconds(1000);
  PlanCacheOptions options;
  options.max_entries = 2;
  options.failure_ttl = absl::Seconds(5);
  options.now = [&now] { return now; };
  Cache cache(options);
  uint64_t seen = cache.generation();
  const auto changed = [&] {
    const uint64_t now_generation = cache.generation();
    const bool moved = now_generation != seen;
    seen = now_generation;
    return moved;
  };
  // Builds and hits keep it: a remembered value is still the cache's.
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a")).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("b"), Returns("b")).ok());
  ASSERT_TRUE(cache.GetOrBuild(Key("a"), Returns("a")).ok());
  EXPECT_FALSE(changed());
  // An eviction (b, least recently used) changes it.
  ASSERT_TRUE(cache.GetOrBuild(Key("c"), Returns("c")).ok());
  EXPECT_TRUE(changed());
  // So does an erase...
  cache.EraseIf([](const PlanKey& key) { return key.graph_id == "a"; });
  EXPECT_TRUE(changed());
  cache.EraseIf([](const PlanKey&) { return false; });
  EXPECT_FALSE(changed());
  // ...and an expired failure being dropped for a new build.
  const Cache::Builder failing = []() -> absl::StatusOr<Cache::Built> {
    return absl::UnimplementedError("no engine");
  };
  EXPECT_FALSE(cache.GetOrBuild(Key("bad"), failing).ok());
  EXPECT_FALSE(cache.GetOrBuild(Key("bad"), failing).ok());  // served within the TTL
  EXPECT_FALSE(changed());
  now += absl::Seconds(6);
  EXPECT_FALSE(cache.GetOrBuild(Key("bad"), failing).ok());
  EXPECT_TRUE(changed());
}

}  // namespace
}  // namespace convserve
