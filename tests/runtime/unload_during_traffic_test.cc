// Unloading a graph while 8 clients send it requests: every request gets
// either its correct output or NOT_FOUND; none is lost, wrong or partial.
#include <atomic>

#include "client/convserve_client.h"
#include "gtest/gtest.h"
#include "tests/runtime/traffic_graphs.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

TEST(UnloadDuringTrafficTest, EveryRequestGetsItsOutputOrNotFound) {
  InferenceCoreOptions options;
  options.executor.threads = 2;
  std::unique_ptr<TestServer> server = TestServer::Start(options);
  const v1::GraphDef graph = TrafficGraph("traffic", v1::FLOAT32, v1::NCHW, 5);
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient admin(client_options);
  ASSERT_TRUE(admin.LoadGraph(graph).ok());
  const std::vector<TrafficRequest> requests = MixedShapes(graph, 1e-5);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 40;
  std::atomic<bool> unloaded{false};
  absl::Status unload_status;
  const TrafficResult result =
      SendTraffic(server->address(), requests, kThreads, kPerThread, [&](int64_t answered) {
        if (answered == 100 && !unloaded.exchange(true)) {
          unload_status = admin.UnloadGraph("traffic");
        }
      });
  ASSERT_TRUE(unload_status.ok()) << unload_status;
  EXPECT_EQ(result.sent, kThreads * kPerThread);
  EXPECT_EQ(result.wrong, 0);
  EXPECT_GE(result.correct, 100);
  int64_t not_found = 0;
  for (const auto& [code, count] : result.errors) {
    EXPECT_EQ(code, "NOT_FOUND") << count << " requests failed with " << code;
    if (code == "NOT_FOUND") not_found = count;
  }
  EXPECT_GT(not_found, 0) << "requests after the unload should have been refused";
  EXPECT_EQ(result.correct + not_found, result.sent);
  std::printf("sent %ld: %ld correct (max rel. L2 %.2e), %ld NOT_FOUND after the unload\n",
              result.sent, result.correct, result.max_error, not_found);
  // The server still serves: reloading brings the graph back.
  ASSERT_TRUE(admin.LoadGraph(graph).ok());
  EXPECT_EQ(SendTraffic(server->address(), requests, 2, 4).correct, 8);
}

}  // namespace
}  // namespace convserve
