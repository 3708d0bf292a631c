// convserve-load against a real server on loopback whose backend counts its
// runs: the requests the client reports are the requests the server ran, the
// CSV and JSON files carry every number of the table, open-loop sends keep to
// their schedule, and errors are counted by status code and fail the exit.
#include "client/load_generator.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/graph_file.h"
#include "client/load_report.h"
#include "client/server_breakdown.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"
#include "tests/test_util/command.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

double Num(const google::protobuf::Struct& object, const std::string& name) {
  return Field(object, name).number_value();
}

// Every number of the table, as the JSON and CSV reports carry it.
void ExpectReportsMatch(const RunResult& result) {
  const google::protobuf::Struct json = ParseJson(ReportJson(result));
  const std::vector<std::vector<std::string>> csv = ParseCsv(ReportCsv(result));
  const std::string table = FormatReport(result);
  const auto& levels = Field(json, "levels").list_value().values();
  ASSERT_EQ(levels.size(), result.levels.size());
  ASSERT_EQ(csv.size(), result.levels.size() + 1);
  const std::vector<std::string>& header = csv[0];
  const auto column = [&](const std::string& name) -> int {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    ADD_FAILURE() << "CSV lacks column " << name;
    return 0;
  };
  for (size_t i = 0; i < result.levels.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("level ", i));
    const LevelResult& level = result.levels[i];
    const google::protobuf::Struct& j = levels[i].struct_value();
    const google::protobuf::Struct& latency = Field(j, "latency_ms").struct_value();
    const std::vector<std::string>& row = csv[i + 1];
    ASSERT_EQ(row.size(), header.size());
    const std::vector<std::pair<std::string, double>> numbers = {
        {"throughput_rps", level.throughput_rps},
        {"images_per_s", level.images_per_s},
        {"mb_per_s", level.mb_per_s}};
    for (const auto& [name, value] : numbers) {
      EXPECT_DOUBLE_EQ(Num(j, name), std::stod(absl::StrFormat("%.9g", value))) << name;
      EXPECT_DOUBLE_EQ(std::stod(row[column(name)]), Num(j, name)) << name;
    }
    const std::vector<std::pair<std::string, double>> latencies = {
        {"min", level.latency.min_ms}, {"p50", level.latency.p50_ms},
        {"p90", level.latency.p90_ms}, {"p95", level.latency.p95_ms},
        {"p99", level.latency.p99_ms}, {"p99_9", level.latency.p999_ms},
        {"max", level.latency.max_ms}};
    for (const auto& [name, value] : latencies) {
      EXPECT_NEAR(Num(latency, name), value, 1e-6 * value) << name;
      EXPECT_EQ(std::stod(row[column("latency_" + name + "_ms")]), Num(latency, name)) << name;
      // The table shows the same value with 3 decimals.
      EXPECT_THAT(table, HasSubstr(absl::StrFormat("%.3f", value))) << name;
    }
    EXPECT_EQ(Num(j, "concurrency"), level.concurrency);
    EXPECT_EQ(row[column("concurrency")], absl::StrCat(level.concurrency));
    EXPECT_EQ(Num(j, "requests"), level.requests);
    EXPECT_EQ(row[column("requests")], absl::StrCat(level.requests));
    EXPECT_EQ(Num(j, "errors"), level.errors);
    EXPECT_EQ(row[column("errors")], absl::StrCat(level.errors));
    EXPECT_EQ(Field(j, "errors_by_code").struct_value().fields_size(),
              static_cast<int>(level.errors_by_code.size()));
    EXPECT_EQ(Field(j, "windows").list_value().values_size(),
              static_cast<int>(level.windows.size()));
    EXPECT_EQ(Field(j, "stable").bool_value(), level.stable);
    // The server's own statistics for the level, next to the client's.
    ASSERT_TRUE(level.server_breakdown.ok()) << level.server_breakdown.status();
    const google::protobuf::Struct& server = Field(j, "server_breakdown").struct_value();
    EXPECT_EQ(Num(server, "success"), level.server_breakdown->success);
    EXPECT_EQ(row[column("server_ok")], absl::StrCat(level.server_breakdown->success));
    const google::protobuf::Struct& stages = Field(server, "stages").struct_value();
    for (const ServerStage& stage : level.server_breakdown->stages) {
      const google::protobuf::Struct& json_stage = Field(stages, stage.name).struct_value();
      EXPECT_EQ(Num(json_stage, "count"), stage.count) << stage.name;
      EXPECT_NEAR(Num(json_stage, "mean_ms"), stage.mean_ms, 1e-6 * stage.mean_ms) << stage.name;
      EXPECT_EQ(std::stod(row[column("server_" + stage.name + "_ms")]), Num(json_stage, "mean_ms"));
      EXPECT_THAT(table, HasSubstr(absl::StrFormat("%.3f", stage.mean_ms))) << stage.name;
    }
  }
  const google::protobuf::Struct& totals = Field(json, "totals").struct_value();
  EXPECT_EQ(Num(totals, "requests_sent"), result.totals.sent);
  EXPECT_EQ(Num(totals, "errors"), result.totals.errors);
  EXPECT_THAT(table, HasSubstr("server-side breakdown (GetStatistics"));
  EXPECT_THAT(table, Not(HasSubstr(kServerBreakdownUnavailable)));
  EXPECT_THAT(table, HasSubstr(absl::StrCat("requests: ", result.totals.sent, " sent")));
}

// Each protocol, with blocking calls (a thread per request in flight) and
// with gRPC's callback API.
class LoadGeneratorTest : public ::testing::TestWithParam<std::tuple<Protocol, bool>> {};

TEST_P(LoadGeneratorTest, ReportedRequestsEqualServerRuns) {
  InstrumentedServer server;
  LoadSessionOptions session_options = ResnetSession(server.address());
  session_options.protocol = std::get<0>(GetParam());
  std::unique_ptr<LoadSession> session = CreateSession(session_options);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Send().ok());

  LoadOptions options = ClosedLoopByCount({1, 3}, 40, 2);
  options.blocking_calls = std::get<1>(GetParam());
  absl::StatusOr<RunResult> result = RunLoad(*session, options);
  ASSERT_TRUE(result.ok()) << result.status();

  // The server's count two ways: its backend's runs, and its own statistics.
  EXPECT_EQ(result->totals.sent, server.run_count());
  absl::StatusOr<v1::GraphStatistics> statistics =
      FetchServerStatistics(session->servers(), "resnet_block");
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  EXPECT_EQ(statistics->success_count(), result->totals.sent);
  EXPECT_EQ(result->totals.ok, result->totals.sent);
  EXPECT_EQ(result->totals.errors, 0);
  EXPECT_EQ(result->output_bytes, 32 * 8 * 8 * 4);
  ASSERT_EQ(result->levels.size(), 2u);
  int64_t measured = 0;
  for (const LevelResult& level : result->levels) {
    SCOPED_TRACE(absl::StrCat("concurrency ", level.concurrency));
    ASSERT_EQ(level.windows.size(), 2u);
    for (const WindowResult& window : level.windows) EXPECT_EQ(window.requests, 40);
    EXPECT_EQ(level.requests, 80);
    EXPECT_EQ(level.ok, 80);
    EXPECT_EQ(level.latency.count, 80);
    EXPECT_TRUE(level.stable);
    const LatencySummary& l = level.latency;
    EXPECT_GT(l.min_ms, 0);
    EXPECT_LE(l.min_ms, l.p50_ms);
    EXPECT_LE(l.p50_ms, l.p90_ms);
    EXPECT_LE(l.p90_ms, l.p95_ms);
    EXPECT_LE(l.p95_ms, l.p99_ms);
    EXPECT_LE(l.p99_ms, l.p999_ms);
    EXPECT_LE(l.p999_ms, l.max_ms);
    EXPECT_GT(level.throughput_rps, 0);
    EXPECT_DOUBLE_EQ(level.images_per_s, level.throughput_rps);
    EXPECT_NEAR(level.mb_per_s, level.throughput_rps * (3 * 16 * 16 * 4 + 32 * 8 * 8 * 4) / 1e6,
                1e-9);
    // Per level too: what the servers answered is what the client got back.
    ASSERT_TRUE(level.server_breakdown.ok()) << level.server_breakdown.status();
    EXPECT_EQ(level.server_breakdown->success, level.level_ok);
    EXPECT_EQ(level.server_breakdown->failure, 0);
    ASSERT_EQ(level.server_breakdown->stages.size(), 6u);
    for (const ServerStage& stage : level.server_breakdown->stages) {
      EXPECT_EQ(stage.count, level.level_ok) << stage.name;
    }
    // Time in the server is part of the client-side latency.
    EXPECT_GT(level.server_breakdown->stages[0].mean_ms, 0);
    EXPECT_LT(level.server_breakdown->stages[0].mean_ms, level.level_mean_ms);
    measured += level.requests;
  }
  // The probe, the windows and each level's tail (sent before it stopped).
  EXPECT_GT(result->totals.sent, 1 + measured);
  ExpectReportsMatch(*result);
}

INSTANTIATE_TEST_SUITE_P(
    ProtocolsAndCalls, LoadGeneratorTest,
    ::testing::Combine(::testing::Values(Protocol::kConvServe, Protocol::kKServe),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<Protocol, bool>>& info) {
      return absl::StrCat(ProtocolName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_blocking" : "_callback");
    });

// An open loop keeps sending on schedule while a level waits for its last
// window's answers, so a server slower than the rate (a sanitizer build on a
// busy machine) may shed some of that tail with RESOURCE_EXHAUSTED once its
// queue is full. Every request is still accounted for (RunLoad returns only
// once each has its answer): each answered ok was one run of the server, and
// each other one was shed.
void ExpectEveryOpenLoopRequestAccounted(const RequestTotals& totals,
                                         const InstrumentedServer& server) {
  EXPECT_EQ(totals.ok, server.run_count());
  for (const auto& [code, count] : totals.errors_by_code) {
    EXPECT_EQ(code, "RESOURCE_EXHAUSTED") << count << " requests";
  }
}

TEST(LoadGeneratorOpenLoopTest, ConstantArrivalsKeepTheSchedule) {
  InstrumentedServer server;
  std::unique_ptr<LoadSession> session = CreateSession(ResnetSession(server.address()));
  ASSERT_NE(session, nullptr);
  LoadOptions options;
  options.mode = LoadMode::kOpenLoop;
  options.request_rates = {50, 100};
  options.measurement.warmup = absl::Milliseconds(100);
  options.measurement.window = absl::Milliseconds(500);
  options.measurement.stability_percent = 1e9;
  options.measurement.stable_windows = 2;
  options.measurement.max_windows = 2;
  absl::StatusOr<RunResult> result = RunLoad(*session, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectEveryOpenLoopRequestAccounted(result->totals, server);
  ASSERT_EQ(result->levels.size(), 2u);
  for (const LevelResult& level : result->levels) {
    SCOPED_TRACE(absl::StrCat(level.request_rate, " req/s"));
    // Sends are assigned by schedule, so a window holds rate x length of them
    // (one either way for where the first lands) however late they went out.
    for (const WindowResult& window : level.windows) {
      EXPECT_NEAR(window.requests, level.request_rate * 0.5, 1);
    }
    EXPECT_EQ(level.errors, 0);
  }
  // 100 ms of warm-up at each rate.
  EXPECT_NEAR(result->warmup_requests, 5 + 10, 2);
}

TEST(LoadGeneratorOpenLoopTest, PoissonArrivalsAverageTheRate) {
  InstrumentedServer server;
  std::unique_ptr<LoadSession> session = CreateSession(ResnetSession(server.address()));
  ASSERT_NE(session, nullptr);
  LoadOptions options;
  options.mode = LoadMode::kOpenLoop;
  options.arrival = Arrival::kPoisson;
  options.request_rates = {200};
  options.measurement.warmup = absl::ZeroDuration();
  options.measurement.window = absl::Seconds(1);
  options.measurement.stable_windows = 1;
  options.measurement.max_windows = 1;
  absl::StatusOr<RunResult> result = RunLoad(*session, options);
  ASSERT_TRUE(result.ok()) << result.status();
  // 200 expected; a Poisson count's standard deviation is sqrt(200) ~ 14.
  EXPECT_NEAR(result->levels[0].requests, 200, 60);
  ExpectEveryOpenLoopRequestAccounted(result->totals, server);
}

std::vector<std::string> BinaryArgs(const std::string& address) {
  return {LoadBinary(),
          "--server=" + address,
          "--graph_file=" + SourcePath("deploy/examples/resnet_block.textproto"),
          "--input_shape=1,3,16,16",
          "--warmup=0.1s",
          "--stability_percent=1e9",
          "--stable_windows=2",
          "--max_windows=2"};
}

TEST(LoadGeneratorBinaryTest, ReportsTheServersRequestCountInEveryFormat) {
  InstrumentedServer server;
  const std::string csv_path = TempPath("run.csv");
  const std::string json_path = TempPath("run.json");
  std::vector<std::string> args = BinaryArgs(server.address());
  args.insert(args.end(), {"--concurrency_range=1:2:+1", "--window_requests=30",
                           "--csv=" + csv_path, "--json=" + json_path});
  const CommandResult run = RunCommand(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("output [1, 32, 8, 8] FLOAT32: "));
  EXPECT_THAT(run.output, HasSubstr("concurrency      req/s      img/s"));
  EXPECT_THAT(run.output, HasSubstr("server-side breakdown (GetStatistics"));
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat("requests: ", server.run_count(), " sent, ",
                                                 server.run_count(), " ok, 0 errors")));

  absl::StatusOr<std::string> json_text = ReadFileBytes(json_path);
  ASSERT_TRUE(json_text.ok()) << json_text.status();
  const google::protobuf::Struct json = ParseJson(*json_text);
  EXPECT_EQ(Num(Field(json, "totals").struct_value(), "requests_sent"), server.run_count());
  const auto& levels = Field(json, "levels").list_value().values();
  ASSERT_EQ(levels.size(), 2);
  EXPECT_EQ(Num(levels[0].struct_value(), "concurrency"), 1);
  EXPECT_EQ(Num(levels[1].struct_value(), "concurrency"), 2);
  for (const auto& level : levels) EXPECT_EQ(Num(level.struct_value(), "requests"), 60);

  absl::StatusOr<std::string> csv_text = ReadFileBytes(csv_path);
  ASSERT_TRUE(csv_text.ok()) << csv_text.status();
  const std::vector<std::vector<std::string>> csv = ParseCsv(*csv_text);
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_THAT(
      csv[0],
      ElementsAre("mode", "concurrency", "request_rate", "arrival", "protocol", "servers", "graph",
                  "batch", "windows", "windows_used", "stable", "requests", "ok", "errors",
                  "throughput_rps", "images_per_s", "mb_per_s", "latency_min_ms", "latency_p50_ms",
                  "latency_p90_ms", "latency_p95_ms", "latency_p99_ms", "latency_p99_9_ms",
                  "latency_max_ms", "latency_mean_ms", "errors_by_code", "level_requests",
                  "level_ok", "server_ok", "server_failed", "server_request_ms", "server_queue_ms",
                  "server_plan_ms", "server_h2d_ms", "server_compute_ms", "server_d2h_ms",
                  "shared_memory", "streaming"));
  EXPECT_EQ(csv[1][11], "60");
  EXPECT_EQ(csv[2][11], "60");
}

TEST(LoadGeneratorBinaryTest, ErrorsAreCountedByCodeAndFailTheRunPastTheRatio) {
  InstrumentedBackendOptions failing;
  failing.fail_every = 4;
  InstrumentedServer server(failing);
  const std::string json_path = TempPath("errors.json");
  std::vector<std::string> args = BinaryArgs(server.address());
  args.insert(args.end(), {"--concurrency_range=1", "--window_requests=20", "--json=" + json_path});

  const CommandResult strict = RunCommand(args);
  EXPECT_EQ(strict.exit_code, 2) << strict.output;
  EXPECT_THAT(strict.output, HasSubstr("errors at concurrency 1: INTERNAL="));
  EXPECT_THAT(strict.output, HasSubstr("exceeds --max_error_ratio=0"));
  absl::StatusOr<std::string> json_text = ReadFileBytes(json_path);
  ASSERT_TRUE(json_text.ok()) << json_text.status();
  const google::protobuf::Struct totals = Field(ParseJson(*json_text), "totals").struct_value();
  const double errors = Num(totals, "errors");
  EXPECT_GT(errors, 0);
  EXPECT_EQ(Num(Field(totals, "errors_by_code").struct_value(), "INTERNAL"), errors);
  EXPECT_EQ(Num(totals, "ok"), server.run_count());
  EXPECT_NEAR(Num(totals, "error_ratio"), 0.25, 0.05);

  args.push_back("--max_error_ratio=0.5");
  const CommandResult tolerant = RunCommand(args);
  EXPECT_EQ(tolerant.exit_code, 0) << tolerant.output;
}

}  // namespace
}  // namespace convserve
