// Concurrent first requests of one shape: one of them builds the plan, the
// others wait for that build (single-flight). /metrics counts one miss and
// every other lookup as a hit, so hits + misses are all lookups, N requests
// over S shapes give S misses and N - S hits however they interleave, and
// the dashboard's hit ratio is the share of lookups that built nothing.
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "gtest/gtest.h"
#include "tests/observability/observed_traffic.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr int kConcurrent = 4;
constexpr absl::Duration kPlanPatience = absl::Seconds(10);

TEST(PlanCacheMetricsTest, LookupsWaitingForABuildCountAsHits) {
  auto compile_gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.compile = compile_gate;
  InferenceCoreOptions options;
  options.executor.threads = kConcurrent;  // every request looks up at once
  std::unique_ptr<TestServer> server = TestServer::Start(options, GatedBackend::AroundCpu(gated), /*serve_metrics=*/true);
  absl::Cleanup open_gate = [compile_gate] { compile_gate->Open(); };
  const v1::GraphDef graph = ObservedGraph("cached");
  ClientOptions client_options;
  client_options.address = server->address();
  ASSERT_TRUE(ConvServeClient(client_options).LoadGraph(graph).ok());
  const std::vector<TrafficRequest> one_shape = {ObservedRequests(graph)[0]};

  TrafficResult cold;
  std::thread sender([&] { cold = SendTraffic(server->address(), one_shape, kConcurrent, 1); });
  absl::Cleanup join_sender = [&] {
    compile_gate->Open();
    sender.join();
  };
  ASSERT_TRUE(compile_gate->AwaitHeld(1, kPlanPatience)) << "no plan build started";
  // Bounded polling: the other requests reach the cache and wait on the build.
  int64_t waits = 0;
  for (const absl::Time give_up = absl::Now() + kPlanPatience;
       (waits = server->core()->runner().Stats().plans.waits) < kConcurrent - 1 &&
       absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(waits, kConcurrent - 1);
  EXPECT_EQ(compile_gate->held(), 1) << "single-flight: one build for one key";
  compile_gate->Open();
  std::move(join_sender).Invoke();
  ASSERT_EQ(cold.correct, kConcurrent) << "wrong " << cold.wrong;
  // Then warm requests: plain hits.
  ASSERT_EQ(SendTraffic(server->address(), one_shape, 1, 2).correct, 2);

  absl::StatusOr<std::string> page = FetchMetrics(server->server()->metrics().port());
  ASSERT_TRUE(page.ok()) << page.status();
  for (const char* line :
       {"\nconvserve_plan_cache_misses_total 1\n", "\nconvserve_plan_cache_hits_total 5\n",
        "\nconvserve_plan_builds_total{gpu=\"cpu\",path=\"cpu\",result=\"ok\"} 1\n",
        "\nconvserve_cached_plans 1\n"}) {
    EXPECT_TRUE(absl::StrContains(*page, line)) << "missing:" << line << *page;
  }
  std::printf("%d concurrent cold requests: 1 build, %lld lookups waited for it; then 2 warm "
              "requests; /metrics: misses 1, hits 5, builds 1\n",
              kConcurrent, static_cast<long long>(waits));
}

}  // namespace
}  // namespace convserve
