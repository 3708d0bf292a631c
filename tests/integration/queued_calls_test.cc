// The server's calls on completion queues (server/queued_calls.h): its own
// grpc.health.v1.Health (Check, Watch, the end of watches at shutdown), a
// call that blocks on a control thread while the queue goes on answering,
// calls spread over threads and queues (one queue shared by every thread, as
// by default, or several), shutdown without grace while calls of every kind
// are open, and a bad --grpc_threads or --grpc_queues.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/small_graph.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kWait = absl::Seconds(30);

std::unique_ptr<Health::Stub> HealthStub(const std::string& address) {
  return Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// A Watch of `service`, ended by the server or after kWait.
std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> Watch(Health::Stub& stub,
                                                               grpc::ClientContext* context,
                                                               const std::string& service) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  HealthCheckRequest request;
  request.set_service(service);
  return stub.Watch(context, request);
}

std::unique_ptr<TestServer> ServerWith(int grpc_threads, std::unique_ptr<Backend> backend = {},
                                       int grpc_queues = 1) {
  TestServerOptions options;
  options.grpc_threads = grpc_threads;
  options.grpc_queues = grpc_queues;
  return TestServer::Start(InferenceCoreOptions(), std::move(backend), options);
}

// An Infer request of the small graph (C=3) at n x 3 x 8 x 8.
v1::InferRequest SmallRequest(const std::string& graph, int64_t n, uint64_t seed) {
  v1::InferRequest request;
  request.set_graph(graph);
  for (int64_t d : {n, int64_t{3}, int64_t{8}, int64_t{8}}) request.mutable_input()->add_shape(d);
  request.mutable_input()->set_data(RandomTensorBytes(v1::FLOAT32, n * 3 * 8 * 8, seed));
  return request;
}

grpc::Status Check(Health::Stub& stub, const std::string& service, HealthCheckResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  HealthCheckRequest request;
  request.set_service(service);
  return stub.Check(&context, request, response);
}

TEST(QueuedCallsTest, HealthCheckAnswersForTheServerAndRefusesOtherNames) {
  std::unique_ptr<TestServer> server = ServerWith(2);
  std::unique_ptr<Health::Stub> stub = HealthStub(server->address());
  HealthCheckResponse response;
  grpc::Status status = Check(*stub, "", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  status = Check(*stub, "no.such.Service", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Opens a watch of `service`, expects `first`, then shuts the server down
// with a long grace: the watch must end because health shut down, not
// because the grace ran out and gRPC cancelled it. Returns the statuses the
// watch was told after the first.
std::vector<HealthCheckResponse::ServingStatus> WatchThroughShutdown(
    TestServer& server, const std::string& service, HealthCheckResponse::ServingStatus first) {
  std::unique_ptr<Health::Stub> stub = HealthStub(server.address());
  grpc::ClientContext context;
  auto reader = Watch(*stub, &context, service);
  HealthCheckResponse response;
  std::vector<HealthCheckResponse::ServingStatus> later;
  if (!reader->Read(&response)) {
    ADD_FAILURE() << "the watch of '" << service << "' was told no status";
    return later;
  }
  EXPECT_EQ(response.status(), first);
  const absl::Time start = absl::Now();
  std::thread stopper([&] { server.server()->Shutdown(absl::Seconds(20)); });
  while (reader->Read(&response)) later.push_back(response.status());
  const grpc::Status status = reader->Finish();
  stopper.join();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "shutdown waited for the open watch";
  return later;
}

TEST(QueuedCallsTest, WatchSeesServingThenNotServingAtShutdownAndEnds) {
  std::unique_ptr<TestServer> server = ServerWith(2);
  EXPECT_THAT(WatchThroughShutdown(*server, "", HealthCheckResponse::SERVING),
              ElementsAre(HealthCheckResponse::NOT_SERVING));
}

TEST(QueuedCallsTest, WatchOfAnUnknownServiceSaysSoAndStaysOpen) {
  std::unique_ptr<TestServer> server = ServerWith(1);
  std::unique_ptr<Health::Stub> stub = HealthStub(server->address());
  // Connected first, so the watch's deadline covers only the watch (on a
  // loaded machine the connection alone can take a good part of it).
  HealthCheckResponse connected;
  ASSERT_TRUE(Check(*stub, "", &connected).ok());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  HealthCheckRequest request;
  request.set_service("no.such.Service");
  auto reader = stub->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  EXPECT_FALSE(reader->Read(&response));  // nothing more until the deadline
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server still answers on its one queue after the watch was cut off.
  HealthCheckResponse check;
  EXPECT_TRUE(Check(*stub, "", &check).ok());
}

// A watch of another name ends at shutdown too, told nothing more.
TEST(QueuedCallsTest, WatchOfAnUnknownServiceEndsAtShutdown) {
  std::unique_ptr<TestServer> server = ServerWith(1);
  EXPECT_THAT(
      WatchThroughShutdown(*server, "no.such.Service", HealthCheckResponse::SERVICE_UNKNOWN),
      IsEmpty());
}

// One queue thread: an UnloadGraph that waits for a warm-up held at the
// gate runs on a control thread, and the queue goes on answering.
TEST(QueuedCallsTest, ABlockedUnloadDoesNotHoldTheQueue) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.compile = gate;
  std::unique_ptr<TestServer> server = ServerWith(1, GatedBackend::AroundCpu(gated));
  ConvServeClient client(server->client_options());
  v1::LoadGraphRequest load;
  *load.mutable_graph() = SmallConvGraph("held", 7);
  v1::TensorShape* shape = load.mutable_warmup()->add_shapes();
  for (int64_t d : {1, 3, 8, 8}) shape->add_dims(d);
  load.mutable_warmup()->set_return_before_ready(true);
  ASSERT_TRUE(client.LoadGraph(load).ok());
  ASSERT_TRUE(gate->AwaitHeld(1, kWait));
  std::atomic<bool> unloaded{false};
  std::thread unloader([&] {
    EXPECT_TRUE(client.UnloadGraph("held").ok());
    unloaded = true;
  });
  // Let the unload reach its wait for the warm-up (it cannot end before
  // the gate opens).
  absl::SleepFor(absl::Milliseconds(200));
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    ASSERT_TRUE(client.ServerLive().value_or(false));
    ASSERT_TRUE(client.ListGraphs().ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  EXPECT_FALSE(unloaded.load()) << "the unload did not wait for the warm-up";
  gate->Open();
  unloader.join();
  EXPECT_TRUE(unloaded.load());
}

// Requests on four connections, served by threads on the queues they share
// (every thread on one queue, the default; one each; uneven splits): every
// one is answered, with the right graph's output shape.
class QueueLayoutTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(QueueLayoutTest, ManyCallsFromFourConnectionsAreAllAnswered) {
  const auto [threads, queues] = GetParam();
  std::unique_ptr<TestServer> server = ServerWith(threads, {}, queues);
  ConvServeClient loader(server->client_options());
  v1::LoadGraphRequest load;
  *load.mutable_graph() = SmallConvGraph("spread", 7);
  ASSERT_TRUE(loader.LoadGraph(load).ok());
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      ClientOptions options = server->client_options();
      options.own_connection = true;
      ConvServeClient client(options);
      for (int i = 0; i < 50; ++i) {
        const int64_t n = 1 + (i + c) % 3;
        absl::StatusOr<v1::InferResponse> response =
            client.Infer(SmallRequest("spread", n, /*seed=*/i));
        ASSERT_TRUE(response.ok()) << response.status();
        ASSERT_EQ(response->output().shape(0), n);
        ++answered;
      }
    });
  }
  for (std::thread& thread : clients) thread.join();
  EXPECT_EQ(answered.load(), 200);
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndQueues, QueueLayoutTest,
                         ::testing::Values(std::pair{4, 1}, std::pair{4, 4}, std::pair{4, 2},
                                           std::pair{3, 2}, std::pair{1, 1}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                           return absl::StrCat(info.param.first, "Threads",
                                               info.param.second, "Queues");
                         });

// A KServe request of the small graph at 1 x 3 x 8 x 8.
inference::ModelInferRequest SmallKServeRequest(const std::string& graph, uint64_t seed) {
  inference::ModelInferRequest request;
  request.set_model_name(graph);
  inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : {1, 3, 8, 8}) input->add_shape(d);
  request.add_raw_input_contents(RandomTensorBytes(v1::FLOAT32, 3 * 8 * 8, seed));
  return request;
}

// Shutdown without grace while streams that never half-close have requests
// in flight, watches are open and unary calls arrive. A call's last events
// start operations on its queue (a stream's Finish once its last read
// failed), which gRPC aborts on if the queue was shut down first: the
// queues must outlive every call. The order of events differs from run to
// run, so this repeats with the shutdown at different moments.
TEST(QueuedCallsTest, ShutdownWithoutGraceWhileCallsOfEveryKindAreOpenEndsThemAll) {
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE(round);
    // Two threads on one queue, then on one queue each.
    std::unique_ptr<TestServer> server = ServerWith(2, {}, 1 + round % 2);
    const std::string address = server->address();
    ConvServeClient loader(server->client_options());
    v1::LoadGraphRequest load;
    *load.mutable_graph() = SmallConvGraph("open", 7);
    ASSERT_TRUE(loader.LoadGraph(load).ok());
    std::atomic<int> streamed{0};
    std::atomic<int> unary{0};
    std::vector<std::thread> clients;
    for (int s = 0; s < 3; ++s) {
      clients.emplace_back([&, s] {
        auto stub = inference::GRPCInferenceService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
        auto stream = stub->ModelStreamInfer(&context);
        // At most kWindow requests of the stream in flight: unbounded, the
        // three streams filled the server's queue (--max_queued_requests)
        // and the unary calls below were refused RESOURCE_EXHAUSTED.
        constexpr uint64_t kWindow = 8;
        absl::Mutex mu;
        uint64_t answered = 0;
        bool ended = false;
        std::thread reader([&] {
          inference::ModelStreamInferResponse response;
          while (stream->Read(&response)) {
            ++streamed;
            absl::MutexLock lock(&mu);
            ++answered;
          }
          absl::MutexLock lock(&mu);
          ended = true;
        });
        // Never half-closes: writes until the server has cut the stream off.
        for (uint64_t i = 0;; ++i) {
          const auto room = [&] { return ended || i < answered + kWindow; };
          {
            absl::MutexLock lock(&mu);
            mu.Await(absl::Condition(&room));
          }
          if (!stream->Write(SmallKServeRequest("open", 100 * s + i))) break;
        }
        reader.join();
        EXPECT_NE(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
      });
    }
    for (const char* service : {"", "no.such.Service"}) {
      clients.emplace_back([&, service] {
        std::unique_ptr<Health::Stub> stub = HealthStub(address);
        grpc::ClientContext context;
        auto reader = Watch(*stub, &context, service);
        HealthCheckResponse response;
        while (reader->Read(&response)) {
        }
        EXPECT_NE(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
      });
    }
    for (int u = 0; u < 2; ++u) {
      clients.emplace_back([&, u] {
        ClientOptions options = server->client_options();
        options.own_connection = true;
        ConvServeClient client(options);
        for (uint64_t i = 0; client.Infer(SmallRequest("open", 1, 1000 * u + i)).ok(); ++i) {
          ++unary;
        }
      });
    }
    // Until every kind of call has started, then a little longer each round.
    const absl::Time started = absl::Now();
    while ((streamed.load() < 3 || unary.load() < 2) && absl::Now() - started < kWait) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    absl::SleepFor(absl::Milliseconds(5 * round));
    const absl::Time stop = absl::Now();
    server->server()->Shutdown(absl::ZeroDuration());
    EXPECT_LT(absl::Now() - stop, absl::Seconds(20));
    for (std::thread& thread : clients) thread.join();
    InferenceCore* core = server->core();
    EXPECT_EQ(core->answered(), core->accepted()) << "an accepted request was not answered";
    EXPECT_GT(streamed.load(), 0);
    EXPECT_GT(unary.load(), 0);
  }
}

TEST(QueuedCallsTest, NoQueueIsRefusedAtStart) {
  TestServerOptions options;
  options.grpc_threads = 0;
  absl::StatusOr<std::unique_ptr<TestServer>> server =
      TestServer::TryStart(InferenceCoreOptions(), options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("gRPC threads must be >= 1"), std::string::npos);
}

TEST(QueuedCallsTest, QueuesOutsideOneToTheThreadsAreRefusedAtStart) {
  for (int queues : {0, 5}) {
    SCOPED_TRACE(queues);
    TestServerOptions options;
    options.grpc_threads = 4;
    options.grpc_queues = queues;
    absl::StatusOr<std::unique_ptr<TestServer>> server =
        TestServer::TryStart(InferenceCoreOptions(), options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find(absl::StrCat(
                  "gRPC completion queues must be 1 to the gRPC threads (4), got ", queues)),
              std::string::npos)
        << server.status();
  }
}

}  // namespace
}  // namespace convserve
