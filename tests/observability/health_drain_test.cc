// grpc.health.v1 turns NOT_SERVING as soon as a graceful shutdown begins,
// while accepted requests are still running, so load balancers and
// Kubernetes stop sending before the server goes; the accepted request still
// completes OK and new requests and graph loads are refused with UNAVAILABLE.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/observability/observed_traffic.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr absl::Duration kDrainPatience = absl::Seconds(10);

// The server-wide status (service ""), or the RPC's error.
absl::StatusOr<HealthCheckResponse::ServingStatus> CheckHealth(Health::Stub& health) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  HealthCheckResponse response;
  const grpc::Status status = health.Check(&context, HealthCheckRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.status();
}

std::string StatusName(const absl::StatusOr<HealthCheckResponse::ServingStatus>& status) {
  return status.ok() ? HealthCheckResponse::ServingStatus_Name(*status)
                     : status.status().ToString();
}

TEST(HealthDrainTest, NotServingWhileAcceptedRequestStillRuns) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  std::unique_ptr<TestServer> server = TestServer::Start({}, GatedBackend::AroundCpu(gated));
  // Every exit opens the gate before joining a thread or stopping the
  // server: a failed assertion must not leave anything waiting for a held run.
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = ObservedGraph("drained");
  ClientOptions client_options;
  client_options.address = server->address();
  ConvServeClient client(client_options);
  ASSERT_TRUE(client.LoadGraph(graph).ok());
  std::unique_ptr<Health::Stub> health = Health::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  ASSERT_EQ(StatusName(CheckHealth(*health)), "SERVING");

  const TrafficRequest held = ObservedRequests(graph)[0];
  absl::StatusOr<v1::InferResponse> held_response;
  absl::Notification answered;
  std::thread caller([&] {
    held_response = client.Infer(held.request);
    answered.Notify();
  });
  absl::Cleanup join_caller = [&] {
    gate->Open();
    caller.join();
  };
  ASSERT_TRUE(gate->AwaitHeld(1, kDrainPatience)) << "the request never reached the backend";

  absl::Notification shut_down;
  const absl::Time shutdown_start = absl::Now();
  std::thread stopper([&] {
    server->server()->Shutdown(absl::Seconds(30));
    shut_down.Notify();
  });
  absl::Cleanup join_stopper = [&] {
    gate->Open();
    stopper.join();
  };

  // Bounded polling: the drain starts on the other thread.
  absl::StatusOr<HealthCheckResponse::ServingStatus> seen = CheckHealth(*health);
  int checks = 1;
  for (const absl::Time give_up = absl::Now() + kDrainPatience;
       StatusName(seen) == "SERVING" && absl::Now() < give_up; ++checks) {
    absl::SleepFor(absl::Milliseconds(5));
    seen = CheckHealth(*health);
  }
  const absl::Duration to_not_serving = absl::Now() - shutdown_start;
  ASSERT_EQ(StatusName(seen), "NOT_SERVING");
  // ... and the accepted request is still held in the backend, unanswered.
  EXPECT_EQ(gate->held(), 1);
  EXPECT_EQ(gate->passed(), 0);
  EXPECT_FALSE(answered.HasBeenNotified());
  EXPECT_FALSE(shut_down.HasBeenNotified());

  // A request that arrives during the drain is refused, not queued.
  for (const absl::Time give_up = absl::Now() + kDrainPatience;
       server->core()->ready() && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::StatusOr<v1::InferResponse> refused = client.Infer(held.request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // So is a graph loaded during the drain: it could never serve.
  const absl::Status late = client.LoadGraph(ObservedGraph("late")).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable) << late;
  EXPECT_FALSE(server->core()->FindGraph("late").ok());
  EXPECT_EQ(StatusName(CheckHealth(*health)), "NOT_SERVING");
  EXPECT_FALSE(answered.HasBeenNotified());

  gate->Open();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kDrainPatience));
  ASSERT_TRUE(held_response.ok()) << held_response.status();
  ASSERT_EQ(held_response->output().data().size(), held.expected.size());
  const double error = RelativeL2Error(DecodeToDouble(held.dtype, held_response->output().data()),
                                       DecodeToDouble(held.dtype, held.expected));
  EXPECT_LE(error, held.bound);
  EXPECT_TRUE(shut_down.WaitForNotificationWithTimeout(kDrainPatience))
      << "Shutdown did not return after the last accepted request finished";
  EXPECT_EQ(server->core()->accepted(), server->core()->answered());
  std::printf("health SERVING before Shutdown; NOT_SERVING %.1f ms after it began (%d checks) "
              "while 1 accepted request was held in the backend; a new request got %s; the "
              "held request then answered OK (rel. L2 %.1e); %lld accepted, %lld answered\n",
              absl::ToDoubleMilliseconds(to_not_serving), checks,
              absl::StatusCodeToString(refused.status().code()).c_str(), error,
              static_cast<long long>(server->core()->accepted()),
              static_cast<long long>(server->core()->answered()));
}

}  // namespace
}  // namespace convserve
