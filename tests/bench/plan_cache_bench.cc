// Cost of a plan-cache hit (the lookup every layer of every request makes),
// single-threaded and with 8 threads hitting the same cache. Google Benchmark.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "engine/runtime/plan_cache.h"

namespace convserve {
namespace {

struct FakePlan {
  int64_t engine = 0;
};

PlanKey ResNetLayerKey(int layer) {
  PlanKey key;
  key.graph_id = "5b8feb43cc3e8b1f28156b5cc9216e74";
  key.layer = layer;
  key.input_shape = {32, 64, 56, 56};
  key.dtype = DType::kFloat16;
  key.layout = Layout::kNHWC;
  key.device = 0;
  key.worker = 1;
  key.policy = "autotune/tf32/ws268435456/n12";
  return key;
}

PlanCache<FakePlan>& SharedCache() {
  static auto* cache = [] {
    auto* c = new PlanCache<FakePlan>({});
    for (int layer = 0; layer < 64; ++layer) {
      absl::StatusOr<std::shared_ptr<FakePlan>> filled = c->GetOrBuild(
          ResNetLayerKey(layer), []() -> absl::StatusOr<PlanCache<FakePlan>::Built> {
            return PlanCache<FakePlan>::Built{std::make_shared<FakePlan>(), 1};
          });
      if (!filled.ok()) {  // the hits below would time builds instead
        std::fprintf(stderr, "filling the cache: %s\n", filled.status().ToString().c_str());
        std::abort();
      }
    }
    return c;
  }();
  return *cache;
}

void BM_PlanCacheHit(benchmark::State& state) {
  PlanCache<FakePlan>& cache = SharedCache();
  const PlanKey key = ResNetLayerKey(static_cast<int>(state.thread_index()) % 64);
  const auto never = []() -> absl::StatusOr<PlanCache<FakePlan>::Built> {
    return absl::InternalError("a hit must not build");
  };
  for (auto _ : state) {
    absl::StatusOr<std::shared_ptr<FakePlan>> plan = cache.GetOrBuild(key, never);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_PlanCacheHit)->Threads(1)->Threads(8)->UseRealTime();

}  // namespace
}  // namespace convserve

BENCHMARK_MAIN();
