// The GPU device pool behind a real gRPC server: mixed-shape traffic from 8
// client threads over every visible GPU (workers polling for work, as by
// default, and sleeping at once), every output checked against the
// CPU reference; unloading frees the graph's GPU memory. Skips without a GPU.
#include <cuda_runtime_api.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "engine/cudnn/cudnn_backend.h"
#include "engine/runtime/device_pool.h"
#include "gtest/gtest.h"
#include "tests/runtime/traffic_graphs.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr double kFloat32Bound = 1e-3;  // TF32 allowed, as by default
constexpr double kHalfBound = 1e-2;

// `worker_spin`: zero, or how long a worker polls for the next request
// (the default): both ways of a worker taking its next request.
void CheckMixedTraffic(absl::Duration worker_spin) {
  DevicePoolOptions options;
  options.selection.search = EngineSearch::kHeuristicInstant;
  options.worker_spin = worker_spin;
  absl::StatusOr<std::unique_ptr<DevicePool>> created = DevicePool::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  DevicePool* pool = created->get();  // owned by the server below, which outlives its use
  std::unique_ptr<TestServer> server = TestServer::Start({}, *std::move(created));

  const v1::GraphDef graphs[] = {TrafficGraph("f32_nchw", v1::FLOAT32, v1::NCHW, 1),
                                 TrafficGraph("f16_nhwc", v1::FLOAT16, v1::NHWC, 2)};
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient admin(client_options);
  std::vector<TrafficRequest> requests;
  for (const v1::GraphDef& graph : graphs) {
    ASSERT_TRUE(admin.LoadGraph(graph).ok());
    for (TrafficRequest& r :
         MixedShapes(graph, graph.data_type() == v1::FLOAT32 ? kFloat32Bound : kHalfBound)) {
      requests.push_back(std::move(r));
    }
  }
  constexpr int kThreads = 8;
  constexpr int kPerThread = 150;
  const TrafficResult result = SendTraffic(server->address(), requests, kThreads, kPerThread);
  EXPECT_EQ(result.sent, kThreads * kPerThread);
  EXPECT_EQ(result.correct, result.sent);
  EXPECT_EQ(result.wrong, 0);
  EXPECT_TRUE(result.errors.empty());

  const std::vector<DeviceStats> counters = pool->Stats().devices;
  int64_t total = 0;
  for (const DeviceStats& c : counters) {
    std::printf("GPU %s (%s): %ld requests\n", c.device.c_str(), c.name.c_str(), c.completed);
    if (counters.size() > 1) EXPECT_GT(c.completed, 0) << "GPU " << c.device << " got no work";
    total += c.completed;
  }
  EXPECT_EQ(total, result.sent);
  // 2 graphs x 3 layers x 4 shapes: one engine search each (all GPUs are one
  // model here), and one plan finalization per key on each worker that ran it.
  const int64_t keys = 2 * 3 * 4;
  const PlanCacheStats choices = pool->choice_stats();
  const PlanCacheStats plans = pool->plan_stats();
  std::printf("distinct keys %ld; engine searches %ld; per-worker plan builds %ld (at most keys x "
              "%zu GPUs x %d workers = %ld); plan cache hits %ld\n",
              keys, choices.builds_ok, plans.builds_ok, counters.size(),
              DevicePoolOptions().workers_per_device,
              keys * static_cast<int64_t>(counters.size()) * DevicePoolOptions().workers_per_device,
              plans.hits);
  EXPECT_EQ(choices.builds_ok, keys);
  EXPECT_LE(plans.builds_ok,
            keys * static_cast<int64_t>(counters.size()) * DevicePoolOptions().workers_per_device);
  EXPECT_GE(plans.builds_ok, keys);
  EXPECT_EQ(plans.builds_failed + choices.builds_failed, 0);
}

TEST(DevicePoolTest, MixedTrafficIsCorrectOnEveryGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CheckMixedTraffic(DevicePoolOptions().worker_spin);
}

TEST(DevicePoolTest, MixedTrafficIsCorrectWithWorkersThatSleepAtOnce) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  ASSERT_GT(DevicePoolOptions().worker_spin, absl::ZeroDuration());  // the other test polls
  CheckMixedTraffic(absl::ZeroDuration());
}

int64_t FreeBytes(int device) {
  size_t free = 0, total = 0;
  cudaSetDevice(device);
  cudaMemGetInfo(&free, &total);
  return static_cast<int64_t>(free);
}

TEST(DevicePoolTest, UnloadDuringTrafficFreesGpuMemoryAfterInFlightRequests) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  absl::StatusOr<std::unique_ptr<DevicePool>> created = DevicePool::Create({});
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<TestServer> server = TestServer::Start({}, *std::move(created));
  // Wide layers: about 2 x 37.7 MB of float32 weights on every GPU.
  v1::GraphDef graph;
  graph.set_name("wide");
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NHWC);
  graph.set_input_channels(1024);
  for (int i = 0; i < 2; ++i) {
    v1::ConvLayer* layer = graph.add_layers();
    layer->set_out_channels(1024);
    for (int d = 0; d < 2; ++d) {
      layer->add_kernel_size(3);
      layer->add_pad_before(1);
      layer->add_pad_after(1);
    }
    layer->mutable_activation()->set_kind(v1::Activation::RELU);
  }
  ASSERT_TRUE(FillParameters(4, true, &graph).ok());
  const int64_t weight_bytes = 2 * (1024 * 1024 * 9 + 1024) * 4;
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient admin(client_options);
  // Warm the workers' buffers and plans first, so only weights move below.
  ASSERT_TRUE(admin.LoadGraph(graph).ok());
  const std::vector<TrafficRequest> requests = {
      MakeTrafficRequest(graph, {1, 1024, 8, 8}, 1, kFloat32Bound)};
  ASSERT_EQ(SendTraffic(server->address(), requests, 4, 4).correct, 16);
  ASSERT_TRUE(admin.UnloadGraph("wide").ok());
  const int64_t before_load = FreeBytes(0);
  ASSERT_TRUE(admin.LoadGraph(graph).ok());
  const int64_t loaded = FreeBytes(0);
  EXPECT_GE(before_load - loaded, weight_bytes * 9 / 10) << "weights were not uploaded at load";

  std::atomic<bool> unloaded{false};
  const TrafficResult result =
      SendTraffic(server->address(), requests, 8, 20, [&](int64_t answered) {
        if (answered == 40 && !unloaded.exchange(true)) ASSERT_TRUE(admin.UnloadGraph("wide").ok());
      });
  EXPECT_EQ(result.wrong, 0);
  int64_t not_found = 0;
  for (const auto& [code, count] : result.errors) {
    EXPECT_EQ(code, "NOT_FOUND") << result.messages.at(code);
    not_found += count;
  }
  EXPECT_EQ(result.correct + not_found, result.sent);
  const int64_t after_unload = FreeBytes(0);
  std::printf("GPU 0 free memory: %.1f MB before load, %.1f MB loaded, %.1f MB after unload "
              "during traffic (%ld correct, %ld NOT_FOUND); weights %.1f MB\n",
              before_load / 1e6, loaded / 1e6, after_unload / 1e6, result.correct, not_found,
              weight_bytes / 1e6);
  EXPECT_GE(after_unload - loaded, weight_bytes * 9 / 10) << "weights were not freed";
}

}  // namespace
}  // namespace convserve
