// The server's /metrics page after mixed traffic (OK over two protocols and
// three shapes, NOT_FOUND, INVALID_ARGUMENT), fetched over HTTP as Prometheus
// fetches it: promtool finds nothing to report, the Grafana dashboard names
// only metrics the server exports, and the deploy scrape config is valid.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/convserve_client.h"
#include "gtest/gtest.h"
#include "tests/observability/child_process.h"
#include "tests/observability/observed_traffic.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

constexpr char kExposedGraph[] = "exposed";
constexpr char kBatchedGraph[] = "exposed_batched";

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(CONVSERVE_SOURCE_DIR, "/", relative);
}

class MetricsExpositionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestServer::Start({}, std::unique_ptr<Backend>(), /*serve_metrics=*/true);
    const v1::GraphDef graph = ObservedGraph(kExposedGraph);
    ClientOptions options;
    options.address = server_->address();
    ASSERT_TRUE(ConvServeClient(options).LoadGraph(graph).ok());
    const TrafficResult ok = SendTraffic(server_->address(), ObservedRequests(graph), 2, 9);
    ASSERT_EQ(ok.correct, 18) << "wrong " << ok.wrong << ", errors " << ok.errors.size();
    ASSERT_TRUE(SendKServeRequests(server_->address(), graph, 3).ok());
    // A graph with dynamic batching leaves the batching families' series.
    v1::LoadGraphRequest batched;
    *batched.mutable_graph() = ObservedGraph(kBatchedGraph);
    batched.mutable_dynamic_batching()->set_max_batch_size(4);
    ASSERT_TRUE(ConvServeClient(options).LoadGraph(batched).ok());
    // One shape, one request at a time: batches of 1, one more plan.
    const TrafficResult batched_ok =
        SendTraffic(server_->address(), {ObservedRequests(batched.graph())[0]}, 1, 6);
    ASSERT_EQ(batched_ok.correct, 6) << "wrong " << batched_ok.wrong;
    const std::map<std::string, int64_t> codes =
        SendFailingRequests(server_->address(), kExposedGraph, {2, 2});
    ASSERT_EQ(codes, (std::map<std::string, int64_t>{{"NOT_FOUND", 2}, {"INVALID_ARGUMENT", 2}}));
    absl::StatusOr<std::string> page = FetchMetrics(server_->server()->metrics().port());
    ASSERT_TRUE(page.ok()) << page.status();
    page_ = *std::move(page);
  }

  std::unique_ptr<TestServer> server_;
  std::string page_;
};

TEST_F(MetricsExpositionTest, PromtoolCheckMetricsReportsNothing) {
  // The page is the full one: every kind of traffic left its series.
  for (const char* series :
       {"convserve_requests_total{code=\"OK\",graph=\"exposed\",protocol=\"convserve\"} 18",
        "convserve_requests_total{code=\"OK\",graph=\"exposed\",protocol=\"kserve\"} 3",
        "convserve_requests_total{code=\"NOT_FOUND\",graph=\"_unknown\",protocol=\"convserve\"} 2",
        "convserve_requests_total{code=\"INVALID_ARGUMENT\",graph=\"exposed\",protocol=\"convserve\"} 2",
        "convserve_request_duration_seconds_bucket{graph=\"exposed\",protocol=\"kserve\",le=\"+Inf\"} 3",
        "convserve_plan_cache_misses_total 4", "convserve_plan_builds_total{",
        "convserve_batch_size_count{graph=\"exposed_batched\"} 6"}) {
    EXPECT_TRUE(absl::StrContains(page_, series)) << "missing: " << series << "\n" << page_;
  }
  absl::StatusOr<ProgramResult> lint =
      RunProgram({"promtool", "check", "metrics"}, page_, absl::Seconds(20));
  ASSERT_TRUE(lint.ok()) << lint.status();
  EXPECT_EQ(lint->exit_code, 0) << lint->output;
  EXPECT_EQ(lint->output, "") << "promtool check metrics found problems in:\n" << page_;
  int families = 0;
  for (absl::string_view line : absl::StrSplit(page_, '\n')) {
    families += absl::StartsWith(line, "# TYPE ") ? 1 : 0;
  }
  std::printf("promtool check metrics: exit %d, no findings on %zu bytes (%d families) after "
              "27 OK and 4 failed requests\n",
              lint->exit_code, page_.size(), families);
}

TEST_F(MetricsExpositionTest, DashboardQueriesNameOnlyExportedMetrics) {
  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create("exposition");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string page_path = dir->path() + "/metrics.txt";
  ASSERT_TRUE(WriteFile(page_path, page_).ok());
  absl::StatusOr<ProgramResult> check = RunProgram(
      {"/usr/bin/python3", SourcePath("tests/observability/dashboard_check.py"),
       "--dashboard=" + SourcePath("deploy/grafana/dashboards/convserve.json"),
       "--metrics_source=" + SourcePath("server/server_metrics.cc"), "--exposition=" + page_path},
      "", absl::Seconds(20));
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->exit_code, 0) << check->output;
  if (check->exit_code == 0) std::printf("%s", check->output.c_str());
}

TEST(DeployScrapeConfigTest, PromtoolCheckConfigAcceptsIt) {
  const std::string config = SourcePath("deploy/prometheus.yml");
  absl::StatusOr<ProgramResult> check =
      RunProgram({"promtool", "check", "config", config}, "", absl::Seconds(20));
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->exit_code, 0) << check->output;
  std::printf("promtool check config %s: exit %d\n%s", config.c_str(), check->exit_code,
              check->output.c_str());
}

}  // namespace
}  // namespace convserve
