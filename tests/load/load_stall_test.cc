// Coordinated omission: a server that stalls for a known time (one backend
// pause of kStall, during which every run waits) must show in the open loop's
// p99, since latency counts from each request's scheduled send time and the
// requests due during the stall are charged the wait; a closed loop at
// concurrency 1 sends nothing while it waits, so only one request sees the
// stall and its p99 stays low.
#include <cstdio>
#include <memory>

#include "client/load_generator.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"

namespace convserve {
namespace {

constexpr absl::Duration kStall = absl::Milliseconds(250);
// Run 0 is the probe; with the loads below this is about half a second in.
constexpr int64_t kStallAtRun = 100;
// 400 requests measured either way.
constexpr double kRate = 200;
constexpr int64_t kRequests = 400;

LevelResult RunAgainstStallingServer(const LoadOptions& options) {
  InstrumentedBackendOptions backend;
  backend.stall_at_run = kStallAtRun;
  backend.stall = kStall;
  InstrumentedServer server(backend);
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(ResnetSession(server.address()), [](const std::string&) {});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  EXPECT_TRUE((*session)->Send().ok());
  absl::StatusOr<RunResult> result = RunLoad(**session, options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_GT(server.run_count(), kStallAtRun + 1) << "the run ended before the stall";
  EXPECT_EQ(result->totals.errors, 0);
  return result->levels.at(0);
}

TEST(LoadStallTest, OpenLoopP99ShowsTheStallClosedLoopP99HidesIt) {
  const LevelResult closed = RunAgainstStallingServer(ClosedLoopByCount({1}, kRequests, 1));

  LoadOptions open;
  open.mode = LoadMode::kOpenLoop;
  open.request_rates = {kRate};
  open.measurement.warmup = absl::ZeroDuration();
  open.measurement.window = absl::Seconds(kRequests / kRate);
  open.measurement.stable_windows = 1;
  open.measurement.max_windows = 1;
  const LevelResult opened = RunAgainstStallingServer(open);

  const double stall_ms = absl::ToDoubleMilliseconds(kStall);
  std::printf(
      "server stall of %.0f ms at request %lld:\n"
      "  closed loop, concurrency 1: %lld requests, p99 %.3f ms, max %.3f ms\n"
      "  open loop, %.0f req/s:      %lld requests, p99 %.3f ms, max %.3f ms\n",
      stall_ms, static_cast<long long>(kStallAtRun), static_cast<long long>(closed.requests),
      closed.latency.p99_ms, closed.latency.max_ms, kRate, static_cast<long long>(opened.requests),
      opened.latency.p99_ms, opened.latency.max_ms);

  ASSERT_EQ(closed.requests, kRequests);
  ASSERT_NEAR(opened.requests, kRequests, 1);
  // Both saw the stalled request itself...
  EXPECT_GE(closed.latency.max_ms, stall_ms * 0.95);
  EXPECT_GE(opened.latency.max_ms, stall_ms * 0.95);
  // ...but only the open loop charged the ~50 requests due during the stall:
  // about 5% of its requests waited over 150 ms, so its p99 is near the stall.
  EXPECT_GE(opened.latency.p99_ms, 150);
  EXPECT_LT(closed.latency.p99_ms, 100);
  EXPECT_GT(opened.latency.p99_ms, 2 * closed.latency.p99_ms);
}

}  // namespace
}  // namespace convserve
