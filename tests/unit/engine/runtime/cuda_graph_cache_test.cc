// CudaGraphCache with a fake executable (no CUDA): capture on the second run
// of a key, replay on later ones; keys by pointers; stale entries (weights or
// plans gone or replaced) never come back; unload, buffer growth and the
// bounds drop entries; uncapturable graphs and shapes fall back for good.
// Also LayerSegmentEnds, the cancellation segments the captures follow.
#include "engine/runtime/cuda_graph_cache.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/layer_segments.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

// Stands in for a worker's executable graphs: counts live instances, so a
// test sees when the cache lets one go. Tests declare the counter before the
// cache, which outlives it otherwise and decrements it from its destructor
// (AddressSanitizer: stack-use-after-scope).
struct FakeExec {
  explicit FakeExec(int id, std::atomic<int>* live) : id(id), live(live) { ++*live; }
  ~FakeExec() { --*live; }
  int id;
  std::atomic<int>* live;
};

using Cache = CudaGraphCache<FakeExec>;

// Stand-ins for the weights and plans a capture depends on.
struct Dependencies {
  std::shared_ptr<int> weights = std::make_shared<int>(0);
  std::vector<std::shared_ptr<int>> plans = {std::make_shared<int>(1), std::make_shared<int>(2)};

  Cache::Dependencies Get() const {
    Cache::Dependencies all = {weights};
    for (const auto& plan : plans) all.push_back(plan);
    return all;
  }
};

CudaGraphKey Key(const std::string& graph, const void* input, const void* output,
                 Shape shape = {1, 8, 16, 16}) {
  CudaGraphKey key;
  key.graph_id = graph;
  key.input_shape = std::move(shape);
  key.input = input;
  key.output = output;
  return key;
}

int in_buffer[4], out_buffer[4];

TEST(CudaGraphCacheTest, CapturesOnSecondRunAndReplaysAfter) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", &in_buffer[0], &out_buffer[0]);
  EXPECT_EQ(cache.Find(key, deps.Get()), nullptr);
  EXPECT_FALSE(cache.ShouldCapture(key)) << "the first run warms up, outside capture";
  EXPECT_EQ(cache.Find(key, deps.Get()), nullptr);
  EXPECT_TRUE(cache.ShouldCapture(key));
  EXPECT_EQ(cache.TakeVariant(key), nullptr);
  cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(7, &live), false);
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<FakeExec> found = cache.Find(key, deps.Get());
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->id, 7);
  }
  const CudaGraphStats stats = cache.stats();
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.replays, 3);
  EXPECT_EQ(stats.entries, 1);
  EXPECT_EQ(stats.fallbacks, 0);
  EXPECT_EQ(live, 1);
}

TEST(CudaGraphCacheTest, PointersArePartOfTheKey) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey a = Key("g", &in_buffer[0], &out_buffer[0]);
  const CudaGraphKey other_input = Key("g", &in_buffer[1], &out_buffer[0]);
  const CudaGraphKey other_output = Key("g", &in_buffer[0], &out_buffer[1]);
  const CudaGraphKey other_shape = Key("g", &in_buffer[0], &out_buffer[0], {2, 8, 16, 16});
  cache.Insert(a, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  EXPECT_NE(cache.Find(a, deps.Get()), nullptr);
  EXPECT_EQ(cache.Find(other_input, deps.Get()), nullptr);
  EXPECT_EQ(cache.Find(other_output, deps.Get()), nullptr);
  EXPECT_EQ(cache.Find(other_shape, deps.Get()), nullptr);
  EXPECT_EQ(cache.Find(Key("h", &in_buffer[0], &out_buffer[0]), deps.Get()), nullptr);
}

TEST(CudaGraphCacheTest, ReloadedWeightsMakeTheEntryStale) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", &in_buffer[0], &out_buffer[0]);
  cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  // The graph is unloaded and loaded again: new weights, maybe at the same
  // address; the old ones are gone.
  deps.weights.reset();
  Dependencies reloaded;
  reloaded.plans = deps.plans;
  EXPECT_EQ(cache.Find(key, reloaded.Get()), nullptr);
  EXPECT_EQ(cache.stats().invalidations, 1);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(live, 0) << "the stale executable was released";
}

TEST(CudaGraphCacheTest, EvictedOrRebuiltPlanMakesTheEntryStale) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", &in_buffer[0], &out_buffer[0]);
  cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  // A different live plan object (rebuilt while the old one lives on).
  Dependencies rebuilt = deps;
  rebuilt.plans[1] = std::make_shared<int>(2);
  EXPECT_EQ(cache.Find(key, rebuilt.Get()), nullptr);
  EXPECT_EQ(cache.stats().invalidations, 1);
  // And a plan that died: the entry is stale even for the old holders.
  cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(2, &live), false);
  Cache::Dependencies after = deps.Get();
  deps.plans[0].reset();
  after[1].reset();
  EXPECT_EQ(cache.Find(key, after), nullptr);
  EXPECT_EQ(cache.stats().invalidations, 2);
  EXPECT_EQ(live, 0);
}

TEST(CudaGraphCacheTest, EraseGraphDropsEntriesSeenKeysAndMarks) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey g = Key("g", &in_buffer[0], &out_buffer[0]);
  const CudaGraphKey g2 = Key("g", &in_buffer[1], &out_buffer[1]);
  const CudaGraphKey h = Key("h", &in_buffer[0], &out_buffer[0]);
  cache.Insert(g, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  cache.Insert(h, deps.Get(), std::make_shared<FakeExec>(2, &live), false);
  EXPECT_FALSE(cache.ShouldCapture(g2));  // seen once
  cache.MarkUncapturable(Key("g", &in_buffer[0], &out_buffer[0], {3, 8, 16, 16}));
  cache.EraseGraph("g");
  EXPECT_EQ(cache.Find(g, deps.Get()), nullptr);
  EXPECT_NE(cache.Find(h, deps.Get()), nullptr);
  EXPECT_EQ(live, 1);
  EXPECT_FALSE(cache.ShouldCapture(g2)) << "a reloaded graph warms up again";
  EXPECT_FALSE(cache.IsUncapturable(Key("g", nullptr, nullptr, {3, 8, 16, 16})));
}

TEST(CudaGraphCacheTest, ClearDropsEntriesButKeepsMarks) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", &in_buffer[0], &out_buffer[0]);
  cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  cache.MarkUncapturable(Key("g", &in_buffer[0], &out_buffer[0], {5, 8, 16, 16}));
  cache.Clear();
  EXPECT_EQ(cache.Find(key, deps.Get()), nullptr);
  EXPECT_EQ(live, 0);
  EXPECT_EQ(cache.stats().invalidations, 1);
  EXPECT_TRUE(cache.IsUncapturable(Key("g", nullptr, nullptr, {5, 8, 16, 16})));
}

TEST(CudaGraphCacheTest, EntriesAreBoundedLeastRecentlyUsedOut) {
  CudaGraphCacheOptions options;
  options.max_entries = 3;
  options.max_variants = 100;
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache(options);
  std::vector<CudaGraphKey> keys;
  for (int i = 0; i < 4; ++i) keys.push_back(Key("g" + std::to_string(i), in_buffer, out_buffer));
  for (int i = 0; i < 3; ++i) {
    cache.Insert(keys[i], deps.Get(), std::make_shared<FakeExec>(i, &live), false);
  }
  ASSERT_NE(cache.Find(keys[0], deps.Get()), nullptr);  // g1 is now the oldest
  cache.Insert(keys[3], deps.Get(), std::make_shared<FakeExec>(3, &live), false);
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.Find(keys[1], deps.Get()), nullptr);
  EXPECT_NE(cache.Find(keys[0], deps.Get()), nullptr);
  EXPECT_NE(cache.Find(keys[2], deps.Get()), nullptr);
  EXPECT_NE(cache.Find(keys[3], deps.Get()), nullptr);
  EXPECT_EQ(live, 3);
}

TEST(CudaGraphCacheTest, PointerVariantsBeyondTheBoundReuseTheOldest) {
  CudaGraphCacheOptions options;
  options.max_variants = 2;
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache(options);
  const CudaGraphKey a = Key("g", &in_buffer[0], &out_buffer[0]);
  const CudaGraphKey b = Key("g", &in_buffer[1], &out_buffer[1]);
  const CudaGraphKey c = Key("g", &in_buffer[2], &out_buffer[2]);
  const CudaGraphKey other = Key("g", &in_buffer[2], &out_buffer[2], {2, 8, 16, 16});
  cache.Insert(a, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  EXPECT_EQ(cache.TakeVariant(b), nullptr) << "one variant: below the bound";
  cache.Insert(b, deps.Get(), std::make_shared<FakeExec>(2, &live), false);
  EXPECT_EQ(cache.TakeVariant(other), nullptr) << "another shape is another topology";
  ASSERT_NE(cache.Find(a, deps.Get()), nullptr);  // b is the older variant now
  std::shared_ptr<FakeExec> taken = cache.TakeVariant(c);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->id, 2);
  EXPECT_EQ(cache.Find(b, deps.Get()), nullptr) << "taken out under its old key";
  cache.Insert(c, deps.Get(), std::move(taken), true);
  EXPECT_EQ(cache.Find(c, deps.Get())->id, 2);
  EXPECT_EQ(cache.stats().updates, 1);
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(live, 2);
}

TEST(CudaGraphCacheTest, NewVariantWaitsUntilAnOldOneIdles) {
  // A client cycling through more regions than max_variants: while every
  // variant keeps running, a new pointer pair runs plain instead of taking
  // one (which would recapture on every request).
  CudaGraphCacheOptions options;
  options.max_variants = 2;
  // Long enough that a descheduled test thread (a loaded CI machine) does
  // not see a variant idle before the checks that expect it busy.
  options.variant_idle = absl::Milliseconds(500);
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache(options);
  const CudaGraphKey a = Key("g", &in_buffer[0], &out_buffer[0]);
  const CudaGraphKey b = Key("g", &in_buffer[1], &out_buffer[1]);
  const CudaGraphKey c = Key("g", &in_buffer[2], &out_buffer[2]);
  const CudaGraphKey other_shape = Key("g", &in_buffer[2], &out_buffer[2], {2, 8, 16, 16});
  cache.Insert(a, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  cache.Insert(b, deps.Get(), std::make_shared<FakeExec>(2, &live), false);
  EXPECT_FALSE(cache.ShouldCapture(c)) << "first run";
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(cache.ShouldCapture(c)) << "both variants ran just now";
  }
  EXPECT_EQ(cache.stats().variant_waits, 3) << "the first run is no wait";
  EXPECT_FALSE(cache.ShouldCapture(other_shape));
  EXPECT_TRUE(cache.ShouldCapture(other_shape)) << "another shape has room";
  EXPECT_EQ(cache.stats().variant_waits, 3);
  // b idles past variant_idle while a keeps running: c may take b.
  const absl::Time idle_from = absl::Now();
  while (absl::Now() - idle_from < options.variant_idle + absl::Milliseconds(10)) {
    ASSERT_NE(cache.Find(a, deps.Get()), nullptr);
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(cache.ShouldCapture(c)) << "b has not run for longer than variant_idle";
  std::shared_ptr<FakeExec> taken = cache.TakeVariant(c);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->id, 2);
  cache.Insert(c, deps.Get(), std::move(taken), true);
  EXPECT_NE(cache.Find(a, deps.Get()), nullptr);
  EXPECT_NE(cache.Find(c, deps.Get()), nullptr);
  EXPECT_EQ(live, 2);
}

TEST(CudaGraphCacheTest, UncapturableTopologyIsNeverCapturedAgain) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", &in_buffer[0], &out_buffer[0]);
  const CudaGraphKey variant = Key("g", &in_buffer[1], &out_buffer[1]);
  cache.Insert(variant, deps.Get(), std::make_shared<FakeExec>(1, &live), false);
  EXPECT_FALSE(cache.ShouldCapture(key));
  EXPECT_TRUE(cache.ShouldCapture(key));
  cache.MarkUncapturable(key);
  EXPECT_EQ(cache.stats().fallbacks, 1);
  EXPECT_EQ(cache.Find(variant, deps.Get()), nullptr) << "its variants go too";
  EXPECT_EQ(live, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(cache.ShouldCapture(key));
    EXPECT_FALSE(cache.ShouldCapture(variant));
  }
  const CudaGraphKey other_shape = Key("g", &in_buffer[0], &out_buffer[0], {2, 8, 16, 16});
  EXPECT_FALSE(cache.ShouldCapture(other_shape)) << "another shape warms up first";
  EXPECT_TRUE(cache.ShouldCapture(other_shape)) << "and is captured when it runs again";
}

TEST(CudaGraphCacheTest, SeenKeysAreBounded) {
  CudaGraphCacheOptions options;
  options.max_seen = 2;
  Cache cache(options);
  const CudaGraphKey a = Key("a", in_buffer, out_buffer);
  EXPECT_FALSE(cache.ShouldCapture(a));
  EXPECT_FALSE(cache.ShouldCapture(Key("b", in_buffer, out_buffer)));
  EXPECT_FALSE(cache.ShouldCapture(Key("c", in_buffer, out_buffer)));
  EXPECT_FALSE(cache.ShouldCapture(a)) << "a was forgotten: it warms up again";
  EXPECT_TRUE(cache.ShouldCapture(a));
}

TEST(CudaGraphCacheTest, EraseFromAnotherThreadWhileTheWorkerLooksUp) {
  std::atomic<int> live{0};
  Dependencies deps;
  Cache cache({});
  const CudaGraphKey key = Key("g", in_buffer, out_buffer);
  std::thread worker([&] {
    for (int i = 0; i < 2000; ++i) {
      if (cache.Find(key, deps.Get()) == nullptr) {
        cache.Insert(key, deps.Get(), std::make_shared<FakeExec>(i, &live), false);
      }
    }
  });
  for (int i = 0; i < 2000; ++i) cache.EraseGraph("g");
  worker.join();
  cache.EraseGraph("g");
  EXPECT_EQ(live, 0);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(LayerSegmentsTest, SegmentsCloseAtTheBound) {
  EXPECT_TRUE(LayerSegmentEnds({}, 2.0).empty());
  EXPECT_EQ(LayerSegmentEnds({0.1, 0.1, 0.1}, 2.0), (std::vector<size_t>{3}));
  EXPECT_EQ(LayerSegmentEnds({3.0, 3.0, 3.0}, 2.0), (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(LayerSegmentEnds({1.0, 1.0, 0.5, 1.5, 0.1}, 2.0), (std::vector<size_t>{2, 4, 5}));
}

}  // namespace
}  // namespace convserve
