// Warm-up at load on the GPU device pool (docs/runtime.md, "Warm-up at
// load"): after a LoadGraph with warm-up shapes returns, every worker of
// every GPU holds the plans of every layer for every shape (and, with
// dynamic batching, for the batches formed from them), so traffic of those
// shapes from many threads builds no plan (the plan cache sees no miss) and
// its outputs match the CPU reference; a second pool on the same plan store
// warms up without an engine search. Skips without a GPU.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/runtime/device_pool.h"
#include "gtest/gtest.h"
#include "tests/runtime/traffic_graphs.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr double kHalfBound = 1e-2;
constexpr int kLayers = 3;  // TrafficGraph's

struct Served {
  DevicePool* pool = nullptr;  // owned by the server, which outlives its use
  std::unique_ptr<TestServer> server;
  int gpus = 0;
};

Served Serve(const std::string& plan_cache_dir = "") {
  DevicePoolOptions options;
  options.selection.search = EngineSearch::kHeuristicInstant;
  options.plan_cache_dir = plan_cache_dir;
  absl::StatusOr<std::unique_ptr<DevicePool>> created = DevicePool::Create(options);
  EXPECT_TRUE(created.ok()) << created.status();
  Served served;
  served.pool = created->get();
  served.gpus = static_cast<int>(served.pool->Stats().devices.size());
  served.server = TestServer::Start({}, *std::move(created));
  return served;
}

v1::LoadGraphRequest WarmLoad(const v1::GraphDef& graph,
                              const std::vector<std::vector<int64_t>>& shapes) {
  v1::LoadGraphRequest request;
  *request.mutable_graph() = graph;
  for (const auto& dims : shapes) {
    v1::TensorShape* shape = request.mutable_warmup()->add_shapes();
    for (int64_t d : dims) shape->add_dims(d);
  }
  return request;
}

ConvServeClient ClientOf(const Served& served) {
  ClientOptions options;
  options.address = served.server->address();
  return ConvServeClient(options);
}

TEST(WarmupGpuTest, FirstRequestsOfWarmedShapesBuildNoPlan) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  Served served = Serve();
  const int workers = DevicePoolOptions().workers_per_device;
  const v1::GraphDef graph = TrafficGraph("warm_f16", v1::FLOAT16, v1::NHWC, 3);
  const std::vector<std::vector<int64_t>> shapes = {{1, 3, 16, 16}, {4, 3, 8, 8}};
  ConvServeClient client = ClientOf(served);
  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(WarmLoad(graph, shapes));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->graph().state(), v1::GraphInfo::READY) << loaded->graph().warmup_error();
  EXPECT_EQ(client.ModelReady("warm_f16").value_or(false), true);

  const int64_t expected_plans = int64_t{kLayers} * shapes.size() * served.gpus * workers;
  const PlanCacheStats warmed = served.pool->plan_stats();
  std::printf("warm-up: %d GPU(s) x %d workers x %zu shapes x %d layers: %ld plans built in "
              "%.3f s\n",
              served.gpus, workers, shapes.size(), kLayers, warmed.builds_ok,
              loaded->graph().warmup_seconds());
  EXPECT_EQ(warmed.misses, expected_plans) << "every worker of every GPU builds its own plans";
  EXPECT_EQ(warmed.builds_ok, expected_plans);

  std::vector<TrafficRequest> requests;
  for (size_t i = 0; i < shapes.size(); ++i) {
    requests.push_back(MakeTrafficRequest(graph, shapes[i], 200 + i, kHalfBound));
  }
  const TrafficResult result = SendTraffic(served.server->address(), requests, 8, 40);
  EXPECT_EQ(result.correct, result.sent);
  EXPECT_TRUE(result.errors.empty());
  const PlanCacheStats after = served.pool->plan_stats();
  EXPECT_EQ(after.misses, warmed.misses) << "a request of a warmed shape built a plan";
  EXPECT_EQ(after.builds_ok, warmed.builds_ok);
  for (const DeviceStats& device : served.pool->Stats().devices) {
    std::printf("GPU %s: %ld requests\n", device.device.c_str(), device.completed);
  }
}

TEST(WarmupGpuTest, BatchesTheBatcherFormsAreWarmedToo) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  Served served = Serve();
  const int workers = DevicePoolOptions().workers_per_device;
  v1::LoadGraphRequest request =
      WarmLoad(TrafficGraph("warm_batched", v1::FLOAT16, v1::NHWC, 4), {{1, 3, 16, 16}});
  request.mutable_dynamic_batching()->set_max_batch_size(8);
  request.mutable_dynamic_batching()->add_preferred_batch_size(4);
  ConvServeClient client = ClientOf(served);
  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(request);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->graph().state(), v1::GraphInfo::READY) << loaded->graph().warmup_error();
  ASSERT_EQ(loaded->graph().warmup_shapes_size(), 3);  // N = 1, 4 and 8
  EXPECT_EQ(served.pool->plan_stats().builds_ok, int64_t{kLayers} * 3 * served.gpus * workers);
}

TEST(WarmupGpuTest, RestartOnThePlanStoreWarmsUpWithoutSearching) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::string store = ::testing::TempDir() + "/warmup_gpu_test_store";
  std::filesystem::remove_all(store);
  std::filesystem::create_directories(store);
  const v1::GraphDef graph = TrafficGraph("warm_store", v1::FLOAT32, v1::NCHW, 5);
  for (int run = 0; run < 2; ++run) {
    Served served = Serve(store);
    ConvServeClient client = ClientOf(served);
    absl::StatusOr<v1::LoadGraphResponse> loaded =
        client.LoadGraph(WarmLoad(graph, {{2, 3, 12, 20}}));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->graph().state(), v1::GraphInfo::READY) << loaded->graph().warmup_error();
    const EngineSearchStats search = served.pool->Stats().engine_search;
    std::printf("run %d: warm-up %.3f s, %ld searches, %ld choices from the store\n", run,
                loaded->graph().warmup_seconds(), search.searches, search.stored_choices);
    // One search per layer problem and GPU model on the fresh store.
    if (run == 0) {
      EXPECT_GE(search.searches, kLayers);
    } else {
      EXPECT_EQ(search.searches, 0) << "the restart searched again";
      EXPECT_GE(search.stored_choices, kLayers);
    }
  }
}

}  // namespace
}  // namespace convserve
