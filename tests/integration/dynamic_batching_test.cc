// Dynamic batching through a real loopback server on the CPU backend: the
// settings at LoadGraph (and how GetGraph and KServe ModelConfig report
// them), concurrent requests (message bytes and system shared memory) joined
// into one execution as GetStatistics, KServe ModelStatistics and the
// Prometheus histograms count it, each answer byte-identical to the same
// request on a graph that does not batch, one bad request among batch-mates,
// and a drain that answers requests still waiting for batch-mates. The one
// worker is held by a gate so requests provably wait together.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grpc_status.h"
#include "tests/integration/shared_memory_test_support.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/random_tensor.h"

namespace convserve {
namespace {

using ::testing::ElementsAre;

constexpr char kBatched[] = "batched";
constexpr char kAlone[] = "alone";

v1::LoadGraphRequest LoadRequest(const std::string& name, int max_batch_size,
                                 int64_t delay_us = 0, std::vector<int> preferred = {}) {
  v1::LoadGraphRequest request;
  *request.mutable_graph() = SmallGraph(name, v1::FLOAT32, v1::NHWC);
  v1::DynamicBatching* batching = request.mutable_dynamic_batching();
  batching->set_max_batch_size(max_batch_size);
  batching->set_max_queue_delay_microseconds(delay_us);
  for (int size : preferred) batching->add_preferred_batch_size(size);
  return request;
}

// N=1 inputs of InputShape()'s C, H, W, in byte order (NHWC).
std::vector<int64_t> OneInput() {
  std::vector<int64_t> shape = InputShape();
  shape[0] = 1;
  return ByteOrder(shape, v1::NHWC);
}
std::vector<int64_t> OneOutput() {
  std::vector<int64_t> shape = OutputShape();
  shape[0] = 1;
  return ByteOrder(shape, v1::NHWC);
}
constexpr int64_t kOneInputBytes = kFloat32InputBytes / 2;
constexpr int64_t kOneOutputBytes = kFloat32OutputBytes / 2;

std::string RandomInput(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomTensor(DType::kFloat32, kOneInputBytes / 4, 1.0f, &rng);
}

class DynamicBatchingTest : public SharedMemoryTest {
 protected:
  void SetUp() override {
    GatedBackendOptions gated;
    gated.run = gate_;
    gated.run_only_graph = kBatched;
    InferenceCoreOptions options;
    options.executor.threads = 1;  // one execution at a time: the gate holds it
    server_ = TestServer::Start(options, GatedBackend::AroundCpu(gated), /*serve_metrics=*/false);
    ClientOptions client_options;
    client_options.address = server_->address();
    client_options.timeout = absl::ToChronoMilliseconds(kPatience);
    client_ = std::make_unique<ConvServeClient>(client_options);
    kserve_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  std::string GraphId(const std::string& name) {
    absl::StatusOr<std::shared_ptr<const Graph>> graph = server_->core()->FindGraph(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? (*graph)->id() : "";
  }

  // Polls until `count` requests of `name` wait in its batcher (bounded).
  bool AwaitWaiting(const std::string& name, int count) {
    const std::string id = GraphId(name);
    const absl::Time deadline = absl::Now() + kPatience;
    while (absl::Now() < deadline) {
      if (server_->core()->WaitingToBatch(id) == count) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  // A request of one N=1 input with its bytes in the message.
  inference::ModelInferRequest RawRequest(const std::string& model, const std::string& input) {
    inference::ModelInferRequest request = RequestWithoutContents(model, "FP32", OneInput());
    request.add_raw_input_contents(input);
    return request;
  }

  // Sends `request` on its own thread; `*result` is set before `*done`.
  std::thread Send(inference::ModelInferRequest request,
                   absl::StatusOr<inference::ModelInferResponse>* result,
                   absl::Duration deadline = kPatience) {
    return std::thread([this, request = std::move(request), result, deadline] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           absl::ToChronoMilliseconds(deadline));
      inference::ModelInferResponse response;
      grpc::Status status = kserve_->ModelInfer(&context, request, &response);
      *result = status.ok() ? absl::StatusOr<inference::ModelInferResponse>(response)
                            : absl::StatusOr<inference::ModelInferResponse>(FromGrpcStatus(status));
    });
  }

  std::shared_ptr<BackendGate> gate_ = std::make_shared<BackendGate>();
};

TEST_F(DynamicBatchingTest, LoadGraphSettingsShowInGetGraphAndModelConfig) {
  absl::StatusOr<v1::LoadGraphResponse> loaded =
      client_->LoadGraph(LoadRequest(kBatched, 8, 500, {4, 2}));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Load(SmallGraph(kAlone, v1::FLOAT32, v1::NHWC));

  absl::StatusOr<v1::GraphInfo> graph = client_->GetGraph(kBatched);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->has_dynamic_batching());
  EXPECT_EQ(graph->dynamic_batching().max_batch_size(), 8);
  EXPECT_EQ(graph->dynamic_batching().max_queue_delay_microseconds(), 500);
  EXPECT_THAT(graph->dynamic_batching().preferred_batch_size(), ElementsAre(2, 4));
  EXPECT_TRUE(graph->dynamic_batching().dispatch_when_idle());  // the server's default
  absl::StatusOr<v1::GraphInfo> alone = client_->GetGraph(kAlone);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_FALSE(alone->has_dynamic_batching());

  // Triton's view: max_batch_size and dynamic_batching, dims without N.
  for (const std::string& name : {std::string(kBatched), std::string(kAlone)}) {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelConfigRequest request;
    request.set_name(name);
    inference::ModelConfigResponse response;
    ASSERT_TRUE(kserve_->ModelConfig(&context, request, &response).ok());
    const inference::ModelConfig& config = response.config();
    if (name == kBatched) {
      EXPECT_EQ(config.max_batch_size(), 8);
      ASSERT_TRUE(config.has_dynamic_batching());
      EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre(2, 4));
      EXPECT_EQ(config.dynamic_batching().max_queue_delay_microseconds(), 500u);
      EXPECT_THAT(config.input(0).dims(), ElementsAre(-1, -1, kInputChannels));
      EXPECT_THAT(config.output(0).dims(), ElementsAre(-1, -1, kOutputChannels));
    } else {
      EXPECT_EQ(config.max_batch_size(), 0);
      EXPECT_FALSE(config.has_dynamic_batching());
      EXPECT_THAT(config.input(0).dims(), ElementsAre(-1, -1, -1, kInputChannels));
    }
  }

  // The same graph again: the same settings are a no-op, others are refused.
  loaded = client_->LoadGraph(LoadRequest(kBatched, 8, 500, {2, 4}));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->already_loaded());
  loaded = client_->LoadGraph(LoadRequest(kBatched, 16));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "unload it first"))
      << loaded.status();
  v1::LoadGraphRequest triton_rule = LoadRequest(kBatched, 8, 500, {2, 4});
  triton_rule.mutable_dynamic_batching()->set_dispatch_when_idle(false);
  loaded = client_->LoadGraph(triton_rule);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "the delay waited out when idle"))
      << loaded.status();
  // Bad settings name what to change.
  loaded = client_->LoadGraph(LoadRequest("bad", 4, 0, {8}));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "preferred_batch_size 8"))
      << loaded.status();
  loaded = client_->LoadGraph(LoadRequest("bad", 4, -1));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
}

// Six requests (four with bytes in the message, two in system shared
// memory) wait behind a held one and run as one execution of N=6.
TEST_F(DynamicBatchingTest, ConcurrentRequestsRunAsOneExecutionAndSplitBack) {
  ASSERT_TRUE(client_->LoadGraph(LoadRequest(kBatched, 16)).ok());
  Load(SmallGraph(kAlone, v1::FLOAT32, v1::NHWC));
  constexpr int kRequests = 7;
  std::vector<std::string> inputs;
  for (int i = 0; i < kRequests; ++i) inputs.push_back(RandomInput(1300 + i));
  // Requests 5 and 6 read and write system shared memory.
  std::unique_ptr<PosixSharedMemory> memory =
      NewObject("batching", 2 * (kOneInputBytes + kOneOutputBytes));
  RegisterWhole("batching", *memory);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    if (i < 5) {
      requests.push_back(RawRequest(kBatched, inputs[i]));
      continue;
    }
    const int64_t slot = (i - 5) * (kOneInputBytes + kOneOutputBytes);
    memory->Write(slot, inputs[i]);
    memory->Fill(slot + kOneInputBytes, kOneOutputBytes, kUnwritten);
    inference::ModelInferRequest request = RequestWithoutContents(kBatched, "FP32", OneInput());
    PlaceInRegion("batching", kOneInputBytes, slot, InputParameters(&request));
    request.add_outputs()->set_name("output");
    PlaceInRegion("batching", kOneOutputBytes, slot + kOneInputBytes, OutputParameters(&request));
    requests.push_back(request);
  }
  std::vector<absl::StatusOr<inference::ModelInferResponse>> results(
      kRequests, absl::UnknownError("not answered"));
  std::vector<std::thread> threads;
  threads.push_back(Send(requests[0], &results[0]));
  ASSERT_TRUE(gate_->AwaitHeld(1, kPatience));
  for (int i = 1; i < kRequests; ++i) threads.push_back(Send(requests[i], &results[i]));
  ASSERT_TRUE(AwaitWaiting(kBatched, kRequests - 1));
  gate_->Open();
  for (std::thread& t : threads) t.join();

  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    const std::string expected = RawOutput(kAlone, "FP32", OneInput(), inputs[i]);
    ASSERT_EQ(expected.size(), static_cast<size_t>(kOneOutputBytes));
    if (i < 5) {
      ASSERT_EQ(results[i]->raw_output_contents_size(), 1);
      EXPECT_EQ(results[i]->raw_output_contents(0), expected) << "request " << i;
    } else {
      const int64_t slot = (i - 5) * (kOneInputBytes + kOneOutputBytes);
      ExpectOutputInRegion(*results[i], "FP32", OneOutput(), "batching", kOneOutputBytes,
                           slot + kOneInputBytes);
      EXPECT_EQ(memory->Read(slot + kOneInputBytes, kOneOutputBytes), expected)
          << "request " << i;
    }
  }

  // Two executions (the held one, then the six), seven inferences.
  absl::StatusOr<v1::GetStatisticsResponse> statistics = client_->GetStatistics(kBatched);
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  ASSERT_EQ(statistics->graphs_size(), 1);
  const v1::GraphStatistics& figures = statistics->graphs(0);
  EXPECT_EQ(figures.success_count(), kRequests);
  EXPECT_EQ(figures.execution_count(), 2);
  EXPECT_EQ(figures.inference_count(), kRequests);
  ASSERT_EQ(figures.batch_stats_size(), 2);
  EXPECT_EQ(figures.batch_stats(0).batch_size(), 1);
  EXPECT_EQ(figures.batch_stats(0).count(), 1);
  EXPECT_EQ(figures.batch_stats(1).batch_size(), 6);
  EXPECT_EQ(figures.batch_stats(1).count(), 1);
  EXPECT_EQ(figures.batch_delay().count(), kRequests);

  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelStatisticsRequest request;
  request.set_name(kBatched);
  inference::ModelStatisticsResponse response;
  ASSERT_TRUE(kserve_->ModelStatistics(&context, request, &response).ok());
  ASSERT_EQ(response.model_stats_size(), 1);
  const inference::ModelStatistics& model = response.model_stats(0);
  EXPECT_EQ(model.execution_count(), 2u);
  EXPECT_EQ(model.inference_count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(model.inference_stats().success().count(), static_cast<uint64_t>(kRequests));
  ASSERT_EQ(model.batch_stats_size(), 2);
  EXPECT_EQ(model.batch_stats(1).batch_size(), 6u);
  EXPECT_EQ(model.batch_stats(1).compute_infer().count(), 1u);

  // The graph without batching: one execution per request, batch size 1.
  absl::StatusOr<v1::GetStatisticsResponse> alone = client_->GetStatistics(kAlone);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->graphs(0).execution_count(), alone->graphs(0).success_count());
  ASSERT_EQ(alone->graphs(0).batch_stats_size(), 1);
  EXPECT_EQ(alone->graphs(0).batch_stats(0).batch_size(), 1);

  const std::string metrics = server_->server()->metrics().Render();
  EXPECT_TRUE(absl::StrContains(metrics, "convserve_batch_size_count{graph=\"batched\"} 2"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "convserve_batch_size_sum{graph=\"batched\"} 7"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(
      metrics, "convserve_batch_queue_delay_seconds_count{graph=\"batched\"} 7"))
      << metrics;
  EXPECT_FALSE(absl::StrContains(metrics, "convserve_batch_size_count{graph=\"alone\"}"));
}

// Among waiting batch-mates: one whose deadline passes while it waits, one
// with a malformed input, one naming an unregistered region. The others
// run together and are answered correctly.
TEST_F(DynamicBatchingTest, BadRequestsDoNotFailTheirBatchMates) {
  ASSERT_TRUE(client_->LoadGraph(LoadRequest(kBatched, 16)).ok());
  Load(SmallGraph(kAlone, v1::FLOAT32, v1::NHWC));
  std::vector<std::string> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(RandomInput(1400 + i));
  std::vector<absl::StatusOr<inference::ModelInferResponse>> results(
      6, absl::UnknownError("not answered"));
  std::vector<std::thread> threads;
  threads.push_back(Send(RawRequest(kBatched, inputs[0]), &results[0]));
  ASSERT_TRUE(gate_->AwaitHeld(1, kPatience));
  threads.push_back(Send(RawRequest(kBatched, inputs[1]), &results[1]));
  threads.push_back(Send(RawRequest(kBatched, inputs[3]), &results[3]));
  inference::ModelInferRequest short_input = RawRequest(kBatched, inputs[0].substr(4));
  threads.push_back(Send(short_input, &results[4]));
  inference::ModelInferRequest no_region = RequestWithoutContents(kBatched, "FP32", OneInput());
  PlaceInRegion("never_registered", kOneInputBytes, 0, InputParameters(&no_region));
  threads.push_back(Send(no_region, &results[5]));
  ASSERT_TRUE(AwaitWaiting(kBatched, 2));
  // Sent once its batch-mates wait, so its deadline cannot pass before they
  // do (on a loaded machine a later send can start that late). The deadline
  // passes while it waits; it is answered without waiting for the held
  // worker.
  std::thread expiring =
      Send(RawRequest(kBatched, inputs[2]), &results[2], absl::Milliseconds(1000));
  const bool three_waited = AwaitWaiting(kBatched, 3);
  expiring.join();
  EXPECT_TRUE(three_waited) << "the expiring request never waited beside its batch-mates";
  EXPECT_EQ(results[2].status().code(), absl::StatusCode::kDeadlineExceeded) << results[2].status();
  ASSERT_TRUE(AwaitWaiting(kBatched, 2));
  gate_->Open();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(results[4].status().code(), absl::StatusCode::kInvalidArgument) << results[4].status();
  EXPECT_FALSE(results[5].ok());
  for (int i : {0, 1, 3}) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->raw_output_contents(0), RawOutput(kAlone, "FP32", OneInput(), inputs[i]))
        << i;
  }
  absl::StatusOr<v1::GetStatisticsResponse> statistics = client_->GetStatistics(kBatched);
  ASSERT_TRUE(statistics.ok()) << statistics.status();
  const v1::GraphStatistics& figures = statistics->graphs(0);
  EXPECT_EQ(figures.success_count(), 3);
  EXPECT_EQ(figures.execution_count(), 2);
  ASSERT_EQ(figures.batch_stats_size(), 2);
  EXPECT_EQ(figures.batch_stats(1).batch_size(), 2);
}

// Requests waiting out a long max_queue_delay (Triton's rule: waited out
// with the runner idle too) are run, not dropped, when the server shuts down.
TEST_F(DynamicBatchingTest, ShutdownAnswersRequestsWaitingForBatchMates) {
  v1::LoadGraphRequest load = LoadRequest(kBatched, 16, 60'000'000);
  load.mutable_dynamic_batching()->set_dispatch_when_idle(false);
  ASSERT_TRUE(client_->LoadGraph(load).ok());
  gate_->Open();
  std::vector<absl::StatusOr<inference::ModelInferResponse>> results(
      3, absl::UnknownError("not answered"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.push_back(Send(RawRequest(kBatched, RandomInput(1500 + i)), &results[i]));
  }
  ASSERT_TRUE(AwaitWaiting(kBatched, 3));
  const absl::Time start = absl::Now();
  server_->server()->Shutdown(absl::Seconds(10));
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].status();
  EXPECT_EQ(server_->core()->accepted(), server_->core()->answered());
}

}  // namespace
}  // namespace convserve
