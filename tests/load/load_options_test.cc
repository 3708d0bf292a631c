// The load generator's pure parts: sweep ranges, option checks, latency
// percentiles, --server parsing and the report's error lines.
#include "client/load_options.h"

#include <string>
#include <vector>

#include "client/load_generator.h"
#include "client/load_report.h"
#include "client/server_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace convserve {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseRangeTest, MultiplyAddAndSingleValue) {
  EXPECT_THAT(*ParseIntRange("1:64:x2", "c"), ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_THAT(*ParseIntRange("1:8:+1", "c"), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_THAT(*ParseIntRange("2:7:2", "c"), ElementsAre(2, 4, 6));
  EXPECT_THAT(*ParseIntRange("1:3", "c"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ParseIntRange("16", "c"), ElementsAre(16));
  EXPECT_THAT(*ParseRange("0.5:2:x2", "r"), ElementsAre(0.5, 1, 2));
  EXPECT_THAT(*ParseRange("100:400:+100", "r"), ElementsAre(100, 200, 300, 400));
}

TEST(ParseRangeTest, RejectsWhatIsNotARange) {
  for (const char* bad :
       {"", "0", "-1", "8:1", "1:8:x1", "1:8:+0", "1:8:y2", "a", "1:2:3:4", "1:1000000:+0.001"}) {
    absl::StatusOr<std::vector<double>> parsed = ParseRange(bad, "concurrency_range");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--concurrency_range"));
  }
  EXPECT_FALSE(ParseIntRange("1.5", "c").ok());
}

TEST(ValidateLoadOptionsTest, NamesTheBadOption) {
  LoadOptions options;
  EXPECT_TRUE(ValidateLoadOptions(options).ok());
  options.measurement.stable_windows = 11;
  EXPECT_THAT(std::string(ValidateLoadOptions(options).message()), HasSubstr("--max_windows"));
  options = LoadOptions();
  options.mode = LoadMode::kOpenLoop;
  EXPECT_THAT(std::string(ValidateLoadOptions(options).message()), HasSubstr("request rate"));
  options.request_rates = {0};
  EXPECT_FALSE(ValidateLoadOptions(options).ok());
}

TEST(SummarizeLatenciesTest, NearestRankPercentiles) {
  std::vector<double> samples;
  for (int i = 1000; i >= 1; --i) samples.push_back(i);
  const LatencySummary s = SummarizeLatencies(samples);
  EXPECT_EQ(s.count, 1000);
  EXPECT_EQ(s.min_ms, 1);
  EXPECT_EQ(s.p50_ms, 500);
  EXPECT_EQ(s.p90_ms, 900);
  EXPECT_EQ(s.p95_ms, 950);
  EXPECT_EQ(s.p99_ms, 990);
  EXPECT_EQ(s.p999_ms, 999);
  EXPECT_EQ(s.max_ms, 1000);
  EXPECT_EQ(SummarizeLatencies({7}).p99_ms, 7);
  EXPECT_EQ(SummarizeLatencies({}).count, 0);
}

TEST(ServerPoolTest, CommaListIsOneChannelPerAddress) {
  absl::StatusOr<std::unique_ptr<ServerPool>> pool = ServerPool::Create("a:1, b:2");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_FALSE((*pool)->balanced());
  EXPECT_THAT((*pool)->targets(), ElementsAre("a:1", "b:2"));
  EXPECT_EQ(&(*pool)->Next(), (*pool)->clients()[0].get());
  EXPECT_EQ(&(*pool)->Next(), (*pool)->clients()[1].get());
  EXPECT_EQ(&(*pool)->Next(), (*pool)->clients()[0].get());
  EXPECT_FALSE(ServerPool::Create("a:1,,b:2").ok());
  EXPECT_FALSE(ServerPool::Create(" ").ok());
}

TEST(ServerPoolTest, ConnectionsRepeatTheChannelsEachWithItsOwnConnection) {
  absl::StatusOr<std::unique_ptr<ServerPool>> pool = ServerPool::Create("a:1,b:2", {}, 2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const auto& clients = (*pool)->clients();
  ASSERT_EQ(clients.size(), 4u);
  for (const auto& client : clients) EXPECT_TRUE(client->options().own_connection);
  EXPECT_THAT((*pool)->targets(), ElementsAre("a:1", "b:2"));
  ASSERT_EQ((*pool)->servers().size(), 2u);
  EXPECT_EQ((*pool)->servers()[0], clients[0].get());
  EXPECT_EQ((*pool)->servers()[1], clients[1].get());
  // Servers alternate, connections take turns behind them.
  for (const char* address : {"a:1", "b:2", "a:1", "b:2"}) {
    EXPECT_EQ((*pool)->Next().options().address, address);
  }
  EXPECT_EQ(&(*pool)->Next(), clients[0].get());
  EXPECT_FALSE((*ServerPool::Create("a:1"))->clients()[0]->options().own_connection);
  EXPECT_EQ(ServerPool::Create("a:1", {}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ServerPool::Create("dns:///x:1", {}, 3))->clients().size(), 3u);
}

TEST(ServerPoolTest, AutoConnectionsIsOnePerSixteenInFlightUpToEight) {
  EXPECT_EQ(AutoConnections(1), 1);
  EXPECT_EQ(AutoConnections(16), 1);
  EXPECT_EQ(AutoConnections(17), 2);
  EXPECT_EQ(AutoConnections(64), 4);
  EXPECT_EQ(AutoConnections(1000), 8);
}

TEST(ServerPoolTest, ResolverTargetIsOneRoundRobinChannel) {
  for (const char* target : {"dns:///convserve.default.svc:8001", "ipv4:127.0.0.1:1,127.0.0.1:2",
                             "unix:/tmp/convserve.sock"}) {
    absl::StatusOr<std::unique_ptr<ServerPool>> pool = ServerPool::Create(target);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_TRUE((*pool)->balanced()) << target;
    ASSERT_EQ((*pool)->clients().size(), 1u) << target;
    EXPECT_EQ((*pool)->clients()[0]->options().load_balancing_policy, "round_robin");
  }
  EXPECT_FALSE(IsResolverTarget("localhost:8001"));
}

TEST(ResolveTargetTest, ListsTheAddressesBehindATarget) {
  EXPECT_THAT(*ResolveTarget("ipv4:127.0.0.1:1,127.0.0.2:2"),
              ElementsAre("127.0.0.1:1", "127.0.0.2:2"));
  EXPECT_THAT(*ResolveTarget("ipv6:[::1]:5"), ElementsAre("[::1]:5"));
  EXPECT_THAT(*ResolveTarget("unix:/tmp/s.sock"), ElementsAre("unix:/tmp/s.sock"));
  // localhost comes from /etc/hosts, so this needs no network.
  EXPECT_THAT(*ResolveTarget("dns:///localhost:1234"), Contains("127.0.0.1:1234"));
  EXPECT_THAT(*ResolveTarget("dns://8.8.8.8/localhost:1234"), Contains("127.0.0.1:1234"));
  EXPECT_EQ(ResolveTarget("dns:///localhost").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadReportTest, ErrorsAppearByCodeInEveryFormat) {
  RunResult result;
  result.protocol = "convserve";
  result.servers = {"h:1"};
  result.graph = "g\"quoted\"";
  LevelResult level;
  level.concurrency = 2;
  level.requests = 10;
  level.ok = 6;
  level.errors = 4;
  level.errors_by_code = {{"INTERNAL", 1}, {"UNAVAILABLE", 3}};
  result.levels.push_back(level);
  result.totals.sent = 11;
  result.totals.ok = 7;
  result.totals.errors = 4;
  result.totals.errors_by_code = level.errors_by_code;
  EXPECT_THAT(FormatReport(result),
              HasSubstr("errors at concurrency 2: INTERNAL=1, UNAVAILABLE=3"));
  EXPECT_THAT(FormatReport(result), HasSubstr(kServerBreakdownUnavailable));
  EXPECT_THAT(ReportCsv(result), HasSubstr(",INTERNAL=1;UNAVAILABLE=3,"));
  EXPECT_THAT(ReportCsv(result), HasSubstr(",\"g\"\"quoted\"\"\","));
  EXPECT_THAT(ReportJson(result),
              HasSubstr("\"errors_by_code\":{\"INTERNAL\":1,\"UNAVAILABLE\":3}"));
  EXPECT_THAT(ReportJson(result), HasSubstr("\"graph\":\"g\\\"quoted\\\"\""));
  EXPECT_DOUBLE_EQ(ErrorRatio(result.totals), 4.0 / 11);
}

}  // namespace
}  // namespace convserve
