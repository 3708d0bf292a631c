// convserve-load's --warmup_shapes: its LoadGraph warms up the shape the run
// sends by default (the first request then builds nothing), leaves it to the
// server's --warmup_shapes, asks for none, or names a list; a list entry of
// the wrong rank and a warm-up the server refuses end the session with the
// reason.
#include <memory>
#include <string>
#include <vector>

#include "client/convserve_client.h"
#include "client/load_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Dims(const v1::TensorShape& shape) {
  return std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
}

struct Started {
  std::unique_ptr<TestServer> server;
  absl::StatusOr<std::unique_ptr<LoadSession>> session;
  std::vector<std::string> lines;
};

// A CPU server with `server_defaults` as --warmup_shapes, and a session of
// resnet_block (input 1x3x16x16) whose --warmup_shapes is `flag`.
std::unique_ptr<Started> Start(const std::string& flag, const std::string& server_defaults = "") {
  auto started = std::make_unique<Started>();
  InferenceCoreOptions options;
  absl::StatusOr<std::vector<WarmupSize>> defaults = ParseWarmupSizes(server_defaults);
  EXPECT_TRUE(defaults.ok()) << defaults.status();
  options.default_warmup = *defaults;
  started->server = TestServer::Start(options);
  LoadSessionOptions session = ResnetSession(started->server->address());
  absl::StatusOr<LoadWarmup> warmup = ParseLoadWarmup(flag, &session.warmup_sizes);
  EXPECT_TRUE(warmup.ok()) << warmup.status();
  session.warmup = *warmup;
  started->session = LoadSession::Create(
      session, [lines = &started->lines](const std::string& line) { lines->push_back(line); });
  return started;
}

v1::GraphInfo GraphOf(TestServer& server) {
  ClientOptions options;
  options.address = server.address();
  absl::StatusOr<v1::GraphInfo> info = ConvServeClient(options).GetGraph("resnet_block");
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *info : v1::GraphInfo();
}

int64_t PlanMisses(TestServer& server) { return server.core()->runner().Stats().plans.misses; }

TEST(ParseLoadWarmupTest, KeywordsAndLists) {
  std::vector<WarmupSize> sizes;
  EXPECT_EQ(*ParseLoadWarmup("input", &sizes), LoadWarmup::kInput);
  EXPECT_EQ(*ParseLoadWarmup("server", &sizes), LoadWarmup::kServer);
  EXPECT_EQ(*ParseLoadWarmup("none", &sizes), LoadWarmup::kNone);
  EXPECT_TRUE(sizes.empty());
  EXPECT_EQ(*ParseLoadWarmup("1:56x56,8:56x56", &sizes), LoadWarmup::kList);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[1].batch, 8);
  for (const char* bad : {"", "inputs", "1:56"}) {
    absl::StatusOr<LoadWarmup> parsed = ParseLoadWarmup(bad, &sizes);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("--warmup_shapes"));
  }
}

TEST(LoadWarmupTest, InputWarmsTheShapeTheRunSends) {
  std::unique_ptr<Started> started = Start("input");
  ASSERT_TRUE(started->session.ok()) << started->session.status();
  ASSERT_FALSE(started->lines.empty());
  EXPECT_THAT(started->lines.front(), HasSubstr("warmed up 1 shape(s) in"));
  const v1::GraphInfo info = GraphOf(*started->server);
  EXPECT_EQ(info.state(), v1::GraphInfo::READY);
  ASSERT_EQ(info.warmup_shapes_size(), 1);
  EXPECT_EQ(Dims(info.warmup_shapes(0)), (*started->session)->input().shape);
  EXPECT_EQ(PlanMisses(*started->server), 1);
  ASSERT_TRUE((*started->session)->Send().ok());
  EXPECT_EQ(PlanMisses(*started->server), 1) << "the run's first request built its plan";
}

TEST(LoadWarmupTest, NoneAndServerLeaveItToTheServer) {
  std::unique_ptr<Started> none = Start("none", "2:16x16");
  ASSERT_TRUE(none->session.ok()) << none->session.status();
  EXPECT_EQ(GraphOf(*none->server).warmup_shapes_size(), 0) << "none disables the defaults";
  EXPECT_EQ(PlanMisses(*none->server), 0);

  std::unique_ptr<Started> server = Start("server", "2:16x16");
  ASSERT_TRUE(server->session.ok()) << server->session.status();
  const v1::GraphInfo info = GraphOf(*server->server);
  EXPECT_EQ(info.state(), v1::GraphInfo::READY);
  ASSERT_EQ(info.warmup_shapes_size(), 1);
  EXPECT_EQ(Dims(info.warmup_shapes(0)), (std::vector<int64_t>{2, 3, 16, 16}));
}

TEST(LoadWarmupTest, ListsAreCheckedAndRefusalsEndTheSession) {
  std::unique_ptr<Started> listed = Start("1:16x16,2:20x20");
  ASSERT_TRUE(listed->session.ok()) << listed->session.status();
  EXPECT_EQ(GraphOf(*listed->server).warmup_shapes_size(), 2);

  std::unique_ptr<Started> rank = Start("1:4x16x16");
  ASSERT_FALSE(rank->session.ok());
  EXPECT_EQ(rank->session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rank->session.status().message()),
              HasSubstr("--warmup_shapes entry 1:4x16x16 has 3 spatial dims"));

  // Past the server's --max_tensor_bytes: refused by the server.
  std::unique_ptr<Started> too_large = Start("1:100000x100000");
  ASSERT_FALSE(too_large->session.ok());
  EXPECT_EQ(too_large->session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_large->session.status().message()),
              HasSubstr("LoadGraph: warmup.shapes[0] [1, 3, 100000, 100000]"));
}

}  // namespace
}  // namespace convserve
