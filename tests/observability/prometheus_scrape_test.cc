// Debian's real Prometheus scrapes an in-process server every second while a
// known number of requests (37 OK over 3 shapes, 5 failing) goes through; its
// query API then gives back exactly the counts sent, a finite p99 latency
// from the histogram, and the plan cache's misses (one per shape) and hits
// (the rest). Every Grafana dashboard query then runs on the same data.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "gtest/gtest.h"
#include "tests/observability/child_process.h"
#include "tests/observability/observed_traffic.h"
#include "tests/observability/prometheus_server.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr char kScrapedGraph[] = "scraped";
// Sent before a first scrape, so that every series exists and rate() over
// it has two samples by the end (a series first seen in the last scrape has
// no rate, and a dashboard panel on it would show nothing).
constexpr int kWarmUp = 5;
constexpr FailingRequests kWarmUpFailing = {1, 1};
// Then 2 threads x 16 over the 3 shapes: 37 OK in all, and 5 failing.
constexpr int kThreads = 2;
constexpr int kPerThread = 16;
constexpr int kShapes = 3;
constexpr int kOk = kWarmUp + kThreads * kPerThread;
constexpr FailingRequests kFailing = {2, 1};
constexpr int kNotFound = kWarmUpFailing.unknown_graph + kFailing.unknown_graph;
constexpr int kInvalid = kWarmUpFailing.wrong_channels + kFailing.wrong_channels;

using Codes = std::map<std::string, int64_t>;

TEST(PrometheusScrapeTest, QueriesGiveBackWhatWasSent) {
  std::unique_ptr<TestServer> server = TestServer::Start({}, std::unique_ptr<Backend>(), /*serve_metrics=*/true);
  PrometheusServerOptions prometheus_options;
  prometheus_options.target_port = server->server()->metrics().port();
  absl::StatusOr<std::unique_ptr<PrometheusServer>> started =
      PrometheusServer::Start(prometheus_options);
  ASSERT_TRUE(started.ok()) << started.status();
  PrometheusServer& prometheus = **started;

  const v1::GraphDef graph = ObservedGraph(kScrapedGraph);
  ClientOptions client_options;
  client_options.address = server->address();
  ASSERT_TRUE(ConvServeClient(client_options).LoadGraph(graph).ok());
  const std::vector<TrafficRequest> requests = ObservedRequests(graph);
  ASSERT_EQ(requests.size(), kShapes);

  const TrafficResult warm_up = SendTraffic(server->address(), {requests[0]}, 1, kWarmUp);
  ASSERT_EQ(warm_up.correct, kWarmUp);
  ASSERT_EQ(SendFailingRequests(server->address(), kScrapedGraph, kWarmUpFailing),
            (Codes{{"NOT_FOUND", kWarmUpFailing.unknown_graph},
                   {"INVALID_ARGUMENT", kWarmUpFailing.wrong_channels}}));
  absl::Status scraped = prometheus.AwaitScrapeAfter(absl::Now(), absl::Seconds(15));
  ASSERT_TRUE(scraped.ok()) << scraped;

  const TrafficResult traffic = SendTraffic(server->address(), requests, kThreads, kPerThread);
  ASSERT_EQ(traffic.correct, kThreads * kPerThread) << "wrong " << traffic.wrong;
  ASSERT_EQ(SendFailingRequests(server->address(), kScrapedGraph, kFailing),
            (Codes{{"NOT_FOUND", kFailing.unknown_graph},
                   {"INVALID_ARGUMENT", kFailing.wrong_channels}}));
  scraped = prometheus.AwaitScrapeAfter(absl::Now(), absl::Seconds(15));
  ASSERT_TRUE(scraped.ok()) << scraped;

  const auto value = [&](const std::string& promql) {
    absl::StatusOr<double> v = prometheus.QueryValue(promql);
    EXPECT_TRUE(v.ok()) << v.status() << "\n" << prometheus.LogTail();
    std::printf("  %-100s = %g\n", promql.c_str(), v.ok() ? *v : NAN);
    return v.ok() ? *v : NAN;
  };
  std::printf("Prometheus %s after %d OK and %d failing requests over %d shapes:\n",
              prometheus.url().c_str(), kOk, kNotFound + kInvalid, kShapes);
  EXPECT_EQ(value("sum(convserve_requests_total{code=\"OK\"})"), kOk);
  EXPECT_EQ(value("sum(convserve_requests_total{code=\"NOT_FOUND\"})"), kNotFound);
  EXPECT_EQ(value("sum(convserve_requests_total{code=\"INVALID_ARGUMENT\"})"), kInvalid);
  EXPECT_EQ(value("sum(convserve_requests_total{graph=\"scraped\",code=\"OK\"})"), kOk);
  EXPECT_EQ(value("convserve_plan_cache_misses_total"), kShapes);
  EXPECT_EQ(value("convserve_plan_cache_hits_total"), kOk - kShapes);
  EXPECT_EQ(value("convserve_cached_plans"), kShapes);
  EXPECT_EQ(value("sum(convserve_plan_builds_total{result=\"ok\"})"), kShapes);
  const double p99 = value(
      "histogram_quantile(0.99, sum by (le) (rate(convserve_request_duration_seconds_bucket[1m])))");
  EXPECT_TRUE(std::isfinite(p99));
  EXPECT_GT(p99, 0);
  EXPECT_LE(p99, 30);  // the largest finite bucket bound
  const double p50 = value(
      "histogram_quantile(0.5, sum by (le) (increase(convserve_request_duration_seconds_bucket[1m])))");
  EXPECT_TRUE(std::isfinite(p50));
  EXPECT_LE(p50, p99);

  // Every panel of the dashboard is valid PromQL with data on this server.
  absl::StatusOr<ProgramResult> dashboard = RunProgram(
      {"/usr/bin/python3",
       absl::StrCat(CONVSERVE_SOURCE_DIR, "/tests/observability/dashboard_check.py"),
       absl::StrCat("--dashboard=", CONVSERVE_SOURCE_DIR,
                    "/deploy/grafana/dashboards/convserve.json"),
       "--prometheus_url=" + prometheus.url()},
      "", absl::Seconds(30));
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  EXPECT_EQ(dashboard->exit_code, 0) << dashboard->output;
  if (dashboard->exit_code == 0) std::printf("%s", dashboard->output.c_str());
}

}  // namespace
}  // namespace convserve
