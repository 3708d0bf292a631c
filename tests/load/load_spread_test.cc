// Several servers: a comma-separated --server list gets one channel per
// address and hands requests out round-robin, so two servers on loopback
// share a run evenly; a resolver target (ipv4:a,b here, dns:///name in a
// deployment) gets gRPC's round_robin policy, so both are used, where the
// default pick_first would send everything to one; the graph file is loaded
// on every address the target resolves to. With --connections, each server
// gets that many TCP connections, the graph is still loaded once per server,
// and requests take turns over all of them.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "client/load_generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/load/load_test_support.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LoadSpreadTest, CommaSeparatedServersShareRequestsEvenly) {
  InstrumentedServer a;
  InstrumentedServer b;
  absl::StatusOr<std::unique_ptr<LoadSession>> session = LoadSession::Create(
      ResnetSession(a.address() + "," + b.address()), [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->pool().clients().size(), 2u);
  ASSERT_TRUE((*session)->Send().ok());

  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({2}, 100, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  std::printf("requests: %lld on %s, %lld on %s\n", static_cast<long long>(a.run_count()),
              a.address().c_str(), static_cast<long long>(b.run_count()), b.address().c_str());
  EXPECT_EQ(a.run_count() + b.run_count(), result->totals.sent);
  EXPECT_GT(a.run_count(), 0);
  EXPECT_GT(b.run_count(), 0);
  // One request each in turn.
  EXPECT_LE(std::abs(a.run_count() - b.run_count()), 1);
  EXPECT_EQ(result->servers.size(), 2u);
}

// Established TCP connections of this process to local `port` (the client
// ends: their remote port is the server's), from /proc/self/net/tcp{,6}.
int ConnectionsTo(int port) {
  int count = 0;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = remote.rfind(':');
      if (state == "01" && colon != std::string::npos &&
          std::stoi(remote.substr(colon + 1), nullptr, 16) == port) {
        ++count;
      }
    }
  }
  return count;
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

TEST(LoadSpreadTest, ConnectionsOpensThatManyTcpConnectionsToEachServer) {
  InstrumentedServer a;
  InstrumentedServer b;
  LoadSessionOptions options = ResnetSession(a.address() + "," + b.address());
  options.connections = 3;
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(options, [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->pool().clients().size(), 6u);
  EXPECT_EQ((*session)->pool().servers().size(), 2u);
  EXPECT_THAT((*session)->pool().targets(), ElementsAre(a.address(), b.address()));

  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({6}, 120, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->totals.errors, 0);
  EXPECT_EQ(a.run_count() + b.run_count(), result->totals.sent);
  EXPECT_LE(std::abs(a.run_count() - b.run_count()), 1);
  EXPECT_EQ(ConnectionsTo(PortOf(a.address())), 3);
  EXPECT_EQ(ConnectionsTo(PortOf(b.address())), 3);
  EXPECT_EQ(result->servers.size(), 2u);
}

TEST(LoadSpreadTest, OneConnectionIsSharedByDefault) {
  InstrumentedServer a;
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(ResnetSession(a.address()), [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({4}, 40, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ConnectionsTo(PortOf(a.address())), 1);
}

TEST(LoadSpreadTest, ResolverTargetLoadsEveryServerAndBalancesRoundRobin) {
  InstrumentedServer a;
  InstrumentedServer b;
  std::vector<std::string> log;
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(ResnetSession("ipv4:" + a.address() + "," + b.address()),
                          [&log](const std::string& line) { log.push_back(line); });
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->pool().balanced());
  // The graph went to each address, not just the one the balancer picked.
  for (const InstrumentedServer* server : {&a, &b}) {
    EXPECT_TRUE(server->core()->FindGraph("resnet_block").ok());
  }
  EXPECT_THAT(log, ElementsAre(HasSubstr("on " + a.address()), HasSubstr("on " + b.address())));

  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({2}, 200, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  const int64_t total = a.run_count() + b.run_count();
  std::printf("round_robin: %lld on a, %lld on b\n", static_cast<long long>(a.run_count()),
              static_cast<long long>(b.run_count()));
  EXPECT_EQ(total, result->totals.sent);
  // Round-robin alternates once both connections are up (within the first
  // few requests on loopback).
  EXPECT_GE(a.run_count(), total / 5);
  EXPECT_GE(b.run_count(), total / 5);
}

// What a Kubernetes headless Service looks like to the client, with one pod:
// dns:///localhost resolves to 127.0.0.1 (and perhaps ::1, where nothing
// listens: the graph load skips it and so does the balancer).
TEST(LoadSpreadTest, DnsTargetLoadsTheGraphAndServes) {
  InstrumentedServer server;
  const std::string port = server.address().substr(server.address().rfind(':'));
  absl::StatusOr<std::unique_ptr<LoadSession>> session =
      LoadSession::Create(ResnetSession("dns:///localhost" + port), [](const std::string&) {});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Send().ok());
  absl::StatusOr<RunResult> result = RunLoad(**session, ClosedLoopByCount({2}, 20, 1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->totals.errors, 0);
  EXPECT_EQ(result->totals.sent, server.run_count());
}

}  // namespace
}  // namespace convserve
