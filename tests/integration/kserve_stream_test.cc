// KServe ModelStreamInfer (Triton's bidirectional stream) as a Triton client
// drives it, on a real loopback server with the CPU backend: many requests
// pipelined on one stream, each answered once and byte for byte as unary
// ModelInfer answers it, matched by id; per-request errors that leave the
// stream open; requests that really overlap and come back in completion
// order; a stream that stops reading at ModelStreamCall::kMaxPending; and
// client cancellation and server shutdown with requests in flight, after
// which every accepted request has been answered and nothing hangs. Requests
// are held in flight with tests/test_util/gated_backend.h; every wait is
// bounded.
#include "server/kserve_stream.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "client/infer_request_sender.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/naive_conv.h"
#include "tests/test_util/random_graph.h"
#include "tests/test_util/test_server.h"
#include "tests/test_util/traffic.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// Bounded waits for things that take well under a second when all is well.
constexpr absl::Duration kPatience = absl::Seconds(30);

std::string KServeDataTypeOf(v1::DataType type) {
  switch (type) {
    case v1::FLOAT16:
      return "FP16";
    case v1::BFLOAT16:
      return "BF16";
    default:
      return "FP32";
  }
}

// A KServe request for `graph` with `bytes` as the input of logical `shape`.
inference::ModelInferRequest KServeRequest(const std::string& id, const v1::GraphDef& graph,
                                           const std::vector<int64_t>& shape, std::string bytes) {
  inference::ModelInferRequest request;
  request.set_id(id);
  request.set_model_name(graph.name());
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype(KServeDataTypeOf(graph.data_type()));
  for (int64_t d : PhysicalDims(shape, graph.layout())) input->add_shape(d);
  request.add_raw_input_contents(std::move(bytes));
  return request;
}

// C=3 -> 3x3 pad 1 (K=4, relu), float32 NCHW: cheap enough for a hundred
// requests on a shared CPU.
v1::GraphDef SmallGraph(const std::string& name) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(3);
  v1::ConvLayer* layer = graph.add_layers();
  layer->set_out_channels(4);
  layer->mutable_activation()->set_kind(v1::Activation::RELU);
  for (int d = 0; d < 2; ++d) {
    layer->add_kernel_size(3);
    layer->add_pad_before(1);
    layer->add_pad_after(1);
  }
  const absl::Status filled = FillParameters(7, /*with_bias=*/true, &graph);
  EXPECT_TRUE(filled.ok()) << filled;
  return graph;
}

const std::vector<int64_t> kSmallShape = {1, 3, 5, 5};

// A request for SmallGraph with its output from an in-process CPU backend,
// for tests whose server holds every run (no unary answer to compare with).
struct CheckedRequest {
  inference::ModelInferRequest request;
  TrafficRequest reference;
};

CheckedRequest SmallRequest(const v1::GraphDef& graph, const std::string& id, uint64_t seed) {
  CheckedRequest checked;
  checked.reference = MakeTrafficRequest(graph, kSmallShape, seed, /*bound=*/1e-5);
  checked.request = KServeRequest(id, graph, kSmallShape, checked.reference.request.input().data());
  return checked;
}

// Whether a stream response is the correct, complete answer to `checked`.
::testing::AssertionResult AnswersCorrectly(const inference::ModelStreamInferResponse& response,
                                            const CheckedRequest& checked) {
  if (!response.error_message().empty()) {
    return ::testing::AssertionFailure() << "error_message: " << response.error_message();
  }
  const inference::ModelInferResponse& answer = response.infer_response();
  if (answer.raw_output_contents_size() != 1 ||
      answer.raw_output_contents(0).size() != checked.reference.expected.size()) {
    return ::testing::AssertionFailure() << "no output of the expected size";
  }
  const double error =
      RelativeL2Error(DecodeToDouble(checked.reference.dtype, answer.raw_output_contents(0)),
                      DecodeToDouble(checked.reference.dtype, checked.reference.expected));
  if (error > checked.reference.bound) {
    return ::testing::AssertionFailure() << "relative L2 error " << error;
  }
  return ::testing::AssertionSuccess();
}

// Polls `condition` until it holds or `timeout` passes; whether it held.
bool Eventually(const std::function<bool()>& condition, absl::Duration timeout) {
  for (const absl::Time give_up = absl::Now() + timeout; !condition();) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// One ModelStreamInfer call on the blocking client API: the test writes from
// its own thread, a reader thread collects the responses. The destructor
// cancels the call and joins the reader, so a failed assertion leaves
// nothing running.
class StreamCall {
 public:
  explicit StreamCall(inference::GRPCInferenceService::Stub& stub)
      : stream_(stub.ModelStreamInfer(&context_)), reader_([this] { ReadAll(); }) {}
  ~StreamCall() {
    context_.TryCancel();
    reader_.join();
    if (!finished_) stream_->Finish();
  }

  bool Write(const inference::ModelInferRequest& request) { return stream_->Write(request); }
  bool WritesDone() { return stream_->WritesDone(); }
  void Cancel() { context_.TryCancel(); }

  // Waits until at least `count` responses came; false after `timeout`.
  bool AwaitResponses(size_t count, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    const auto enough = [this, count]()
                            ABSL_SHARED_LOCKS_REQUIRED(mu_) { return responses_.size() >= count; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  // Responses in arrival order.
  std::vector<inference::ModelStreamInferResponse> responses() const {
    absl::MutexLock lock(&mu_);
    return responses_;
  }
  // Waits for the server to end the stream and returns the call's status, or
  // DEADLINE_EXCEEDED (made here) when it has not ended after `timeout`.
  grpc::Status Finish(absl::Duration timeout) {
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(absl::Condition(&ended_), timeout)) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the stream did not end");
      }
    }
    finished_ = true;
    return stream_->Finish();
  }

 private:
  void ReadAll() {
    inference::ModelStreamInferResponse response;
    while (stream_->Read(&response)) {
      absl::MutexLock lock(&mu_);
      responses_.push_back(std::move(response));
      response.Clear();
    }
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }

  grpc::ClientContext context_;
  const std::unique_ptr<
      grpc::ClientReaderWriter<inference::ModelInferRequest, inference::ModelStreamInferResponse>>
      stream_;
  mutable absl::Mutex mu_;
  std::vector<inference::ModelStreamInferResponse> responses_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ = false;  // test thread only
  std::thread reader_;     // last: starts reading once the rest is built
};

// Responses by request id; a second answer to one id fails the test.
std::map<std::string, inference::ModelStreamInferResponse> ById(
    const std::vector<inference::ModelStreamInferResponse>& responses) {
  std::map<std::string, inference::ModelStreamInferResponse> by_id;
  for (const inference::ModelStreamInferResponse& response : responses) {
    const std::string& id = response.infer_response().id();
    EXPECT_TRUE(by_id.emplace(id, response).second) << "request " << id << " answered twice";
  }
  return by_id;
}

class KServeStreamTest : public ::testing::Test {
 protected:
  // A server around `backend` (the CPU backend when null) and its clients.
  void StartServer(std::unique_ptr<Backend> backend = nullptr,
                   const InferenceCoreOptions& options = {}) {
    server_ = TestServer::Start(options, std::move(backend));
    ClientOptions client;
    client.address = server_->address();
    client.timeout = absl::ToChronoMilliseconds(kPatience);
    client_ = std::make_unique<ConvServeClient>(client);
    stub_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  void Load(const v1::GraphDef& graph) {
    absl::StatusOr<v1::LoadGraphResponse> loaded = client_->LoadGraph(graph);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<ConvServeClient> client_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(KServeStreamTest, PipelinedRequestsEqualUnaryAnswersByteForByte) {
  StartServer();
  // Four drawn graphs (dtypes, layouts, ranks differ), each at two batch sizes.
  std::vector<RandomGraphCase> graphs;
  for (uint64_t seed : {11, 12, 13, 14}) {
    graphs.push_back(MakeRandomGraph(seed));
    Load(graphs.back().graph);
  }
  constexpr int kRequests = 32;
  std::vector<inference::ModelInferRequest> requests;
  std::map<std::string, inference::ModelInferResponse> unary;
  const absl::Time unary_start = absl::Now();
  for (int i = 0; i < kRequests; ++i) {
    const RandomGraphCase& drawn = graphs[i % graphs.size()];
    std::vector<int64_t> shape = drawn.input_shape;
    shape[0] += (i / graphs.size()) % 2;
    absl::StatusOr<RandomGraphCase> with_shape =
        MakeGraphCase(drawn.graph, shape, /*seed=*/1000 + i, /*with_bias=*/true);
    ASSERT_TRUE(with_shape.ok()) << with_shape.status();
    requests.push_back(
        KServeRequest(absl::StrCat("request-", i), drawn.graph, shape, with_shape->input));
    absl::StatusOr<inference::ModelInferResponse> answer = client_->ModelInfer(requests.back());
    ASSERT_TRUE(answer.ok()) << answer.status();
    unary[requests.back().id()] = *std::move(answer);
  }
  const absl::Duration unary_time = absl::Now() - unary_start;

  StreamCall stream(*stub_);
  const absl::Time stream_start = absl::Now();
  for (const inference::ModelInferRequest& request : requests) ASSERT_TRUE(stream.Write(request));
  // Half-closed with requests still in flight: the server answers them all
  // before it ends the stream.
  ASSERT_TRUE(stream.WritesDone());
  const grpc::Status status = stream.Finish(kPatience);
  const absl::Duration stream_time = absl::Now() - stream_start;
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();

  const std::vector<inference::ModelStreamInferResponse> responses = stream.responses();
  ASSERT_EQ(responses.size(), kRequests);
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(responses);
  ASSERT_EQ(by_id.size(), kRequests);
  for (const auto& [id, expected] : unary) {
    SCOPED_TRACE(id);
    ASSERT_EQ(by_id.count(id), 1u);
    const inference::ModelStreamInferResponse& response = by_id.at(id);
    EXPECT_THAT(response.error_message(), IsEmpty());
    ASSERT_EQ(response.infer_response().raw_output_contents_size(), 1);
    EXPECT_FALSE(response.infer_response().raw_output_contents(0).empty());
    EXPECT_TRUE(response.infer_response().SerializeAsString() == expected.SerializeAsString())
        << "stream and unary answers differ for " << id;
  }
  int in_order = 0;
  for (int i = 0; i < kRequests; ++i) {
    in_order += responses[i].infer_response().id() == absl::StrCat("request-", i);
  }
  std::printf(
      "[ FIGURES ] %d requests on %zu graphs x 2 shapes: one stream %.1f ms, one by one "
      "over ModelInfer %.1f ms; %d of %d responses in arrival position\n",
      kRequests, graphs.size(), absl::ToDoubleMilliseconds(stream_time),
      absl::ToDoubleMilliseconds(unary_time), in_order, kRequests);
}

TEST_F(KServeStreamTest, BadRequestsGetErrorMessagesAndTheStreamGoesOn) {
  StartServer();
  const v1::GraphDef graph = SmallGraph("small");
  Load(graph);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(KServeRequest(absl::StrCat("good-", i), graph, kSmallShape,
                                     RandomTensorBytes(v1::FLOAT32, 75, 20 + i)));
  }
  inference::ModelInferRequest unknown_model = requests[0];
  unknown_model.set_id("unknown-model");
  unknown_model.set_model_name("no_such_model");
  // 4 channels for a 3-channel graph, with bytes to match the shape.
  inference::ModelInferRequest wrong_shape =
      KServeRequest("wrong-shape", graph, {1, 4, 5, 5}, RandomTensorBytes(v1::FLOAT32, 100, 30));
  inference::ModelInferRequest short_data = requests[0];
  short_data.set_id("short-data");
  short_data.mutable_raw_input_contents(0)->resize(10);
  const std::vector<inference::ModelInferRequest> bad = {unknown_model, wrong_shape, short_data};

  // What unary ModelInfer answers for each, sent first.
  std::map<std::string, absl::StatusOr<inference::ModelInferResponse>> unary;
  std::vector<inference::ModelInferRequest> all = requests;
  all.insert(all.end(), bad.begin(), bad.end());
  for (const inference::ModelInferRequest& request : all) {
    unary.emplace(request.id(), client_->ModelInfer(request));
  }

  StreamCall stream(*stub_);
  // good-0, unknown-model, good-1, wrong-shape, good-2, short-data.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream.Write(requests[i]));
    ASSERT_TRUE(stream.Write(bad[i]));
  }
  ASSERT_TRUE(stream.WritesDone());
  const grpc::Status status = stream.Finish(kPatience);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(stream.responses());
  ASSERT_EQ(by_id.size(), 6u);

  for (const inference::ModelInferRequest& request : requests) {
    SCOPED_TRACE(request.id());
    ASSERT_TRUE(unary.at(request.id()).ok()) << unary.at(request.id()).status();
    const inference::ModelStreamInferResponse& response = by_id.at(request.id());
    EXPECT_THAT(response.error_message(), IsEmpty());
    EXPECT_TRUE(response.infer_response().SerializeAsString() ==
                unary.at(request.id())->SerializeAsString());
  }
  for (const inference::ModelInferRequest& request : bad) {
    SCOPED_TRACE(request.id());
    const absl::Status& expected = unary.at(request.id()).status();
    ASSERT_FALSE(expected.ok());
    const inference::ModelStreamInferResponse& response = by_id.at(request.id());
    // The unary call's code and message, in one string.
    EXPECT_EQ(response.error_message(),
              absl::StrCat(absl::StatusCodeToString(expected.code()), ": ", expected.message()));
    EXPECT_EQ(response.infer_response().id(), request.id());
    EXPECT_EQ(response.infer_response().model_name(), request.model_name());
    EXPECT_EQ(response.infer_response().outputs_size(), 0);
    EXPECT_EQ(response.infer_response().raw_output_contents_size(), 0);
    std::printf("[ FIGURES ] %s: \"%s\"\n", request.id().c_str(), response.error_message().c_str());
  }
  EXPECT_EQ(by_id.at("unknown-model").error_message(),
            "NOT_FOUND: model 'no_such_model' is not loaded");
  EXPECT_THAT(by_id.at("wrong-shape").error_message(), StartsWith("INVALID_ARGUMENT: "));
  EXPECT_THAT(by_id.at("short-data").error_message(), StartsWith("INVALID_ARGUMENT: "));
}

TEST_F(KServeStreamTest, LaterRequestsRunWhileAnEarlierOneIsHeldAndAnswerFirst) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  gated.run_only_graph = "held";
  StartServer(GatedBackend::AroundCpu(gated));  // 2 request threads
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef held = SmallGraph("held");
  const v1::GraphDef free = SmallGraph("free");
  Load(held);
  Load(free);
  constexpr int kFree = 8;
  std::vector<CheckedRequest> requests = {SmallRequest(held, "held-0", 40)};
  for (int i = 1; i <= kFree; ++i) {
    requests.push_back(SmallRequest(free, absl::StrCat("free-", i), 40 + i));
  }

  StreamCall stream(*stub_);
  ASSERT_TRUE(stream.Write(requests[0].request));
  ASSERT_TRUE(gate->AwaitHeld(1, kPatience)) << "the first request never reached the backend";
  for (int i = 1; i <= kFree; ++i) ASSERT_TRUE(stream.Write(requests[i].request));
  // The stream kept reading, and the later requests ran and were answered
  // on the other request thread while the first is still running.
  ASSERT_TRUE(stream.AwaitResponses(kFree, kPatience));
  EXPECT_EQ(gate->held(), 1);
  EXPECT_EQ(gate->passed(), 0);
  std::vector<inference::ModelStreamInferResponse> responses = stream.responses();
  ASSERT_EQ(responses.size(), kFree);
  for (const inference::ModelStreamInferResponse& response : responses) {
    EXPECT_THAT(response.infer_response().id(), StartsWith("free-"));
  }

  gate->Open();
  ASSERT_TRUE(stream.WritesDone());
  const grpc::Status status = stream.Finish(kPatience);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  responses = stream.responses();
  ASSERT_EQ(responses.size(), kFree + 1);
  EXPECT_EQ(responses.back().infer_response().id(), "held-0");  // completion order
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(responses);
  for (const CheckedRequest& request : requests) {
    ASSERT_EQ(by_id.count(request.request.id()), 1u) << request.request.id();
    EXPECT_TRUE(AnswersCorrectly(by_id.at(request.request.id()), request)) << request.request.id();
  }
}

TEST_F(KServeStreamTest, StreamStopsReadingAtMaxPendingAndResumes) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  InferenceCoreOptions options;
  options.executor.max_queued = 2 * ModelStreamCall::kMaxPending;  // never the limit here
  StartServer(GatedBackend::AroundCpu(gated), options);
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = SmallGraph("small");
  Load(graph);
  constexpr int kExtra = 8;
  constexpr int kRequests = ModelStreamCall::kMaxPending + kExtra;
  std::vector<CheckedRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    requests.push_back(SmallRequest(graph, absl::StrCat("request-", i), 100 + i));
  }

  StreamCall stream(*stub_);
  // Small messages: all fit gRPC's flow-control window, so every write
  // returns whether or not the server reads them.
  for (const CheckedRequest& request : requests) ASSERT_TRUE(stream.Write(request.request));
  InferenceCore* core = server_->core();
  ASSERT_TRUE(Eventually([core] { return core->accepted() >= ModelStreamCall::kMaxPending; },
                         kPatience));
  // A round trip on the stream's connection after every request was sent: a
  // stream that went on reading would have taken more by now.
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&live_context, inference::ServerLiveRequest(), &live).ok());
  EXPECT_EQ(core->accepted(), ModelStreamCall::kMaxPending);
  EXPECT_THAT(stream.responses(), IsEmpty());

  gate->Open();
  ASSERT_TRUE(stream.AwaitResponses(kRequests, kPatience));
  ASSERT_TRUE(stream.WritesDone());
  const grpc::Status status = stream.Finish(kPatience);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(stream.responses());
  ASSERT_EQ(by_id.size(), kRequests);
  for (const CheckedRequest& request : requests) {
    ASSERT_EQ(by_id.count(request.request.id()), 1u) << request.request.id();
    EXPECT_TRUE(AnswersCorrectly(by_id.at(request.request.id()), request)) << request.request.id();
  }
  EXPECT_EQ(core->accepted(), kRequests);
}

TEST_F(KServeStreamTest, ClientCancelWithRequestsInFlightLeavesTheServerHealthy) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  StartServer(GatedBackend::AroundCpu(gated));
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = SmallGraph("small");
  Load(graph);
  constexpr int kInFlight = 6;
  InferenceCore* core = server_->core();
  {
    StreamCall stream(*stub_);
    for (int i = 0; i < kInFlight; ++i) {
      ASSERT_TRUE(stream.Write(SmallRequest(graph, absl::StrCat("cancelled-", i), 50 + i).request));
    }
    // Two running (held), the rest queued behind them.
    ASSERT_TRUE(gate->AwaitHeld(2, kPatience));
    ASSERT_TRUE(Eventually([core] { return core->accepted() == kInFlight; }, kPatience));
    stream.Cancel();
    const grpc::Status status = stream.Finish(kPatience);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
    EXPECT_THAT(stream.responses(), IsEmpty());
  }
  // The server still owes the backend's answers; each request is answered
  // exactly once (a second answer would count twice).
  EXPECT_EQ(core->answered(), 0);
  gate->Open();
  ASSERT_TRUE(Eventually([core] { return core->answered() >= kInFlight; }, kPatience));
  EXPECT_EQ(core->accepted(), kInFlight);
  EXPECT_EQ(core->answered(), kInFlight);
  const int ran = gate->passed();
  const int64_t answered = core->answered();

  // A new stream on the same server works.
  {
    StreamCall stream(*stub_);
    std::vector<CheckedRequest> requests = {SmallRequest(graph, "after-0", 60),
                                            SmallRequest(graph, "after-1", 61)};
    for (const CheckedRequest& request : requests) ASSERT_TRUE(stream.Write(request.request));
    ASSERT_TRUE(stream.WritesDone());
    const grpc::Status status = stream.Finish(kPatience);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
    const std::map<std::string, inference::ModelStreamInferResponse> by_id =
        ById(stream.responses());
    ASSERT_EQ(by_id.size(), requests.size());
    for (const CheckedRequest& request : requests) {
      EXPECT_TRUE(AnswersCorrectly(by_id.at(request.request.id()), request));
    }
  }
  // Every stream has ended in the server: a shutdown without grace returns
  // (gRPC waits for each call's OnDone, which a stuck stream never reaches).
  absl::Notification shut_down;
  std::thread stopper([&] {
    server_->server()->Shutdown(absl::ZeroDuration());
    shut_down.Notify();
  });
  absl::Cleanup join_stopper = [&stopper] { stopper.join(); };
  EXPECT_TRUE(shut_down.WaitForNotificationWithTimeout(kPatience));
  std::printf(
      "[ FIGURES ] cancelled with %d requests in flight (2 running, %d queued): %lld "
      "answered by the backend, %d of them entered a run (the rest saw the cancellation "
      "first); a new stream then answered 2 of 2\n",
      kInFlight, kInFlight - 2, static_cast<long long>(answered), ran);
}

TEST_F(KServeStreamTest, ShutdownAnswersAcceptedRequestsAndRefusesLaterOnes) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  StartServer(GatedBackend::AroundCpu(gated));
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = SmallGraph("small");
  Load(graph);
  constexpr int kAccepted = 3;
  std::vector<CheckedRequest> requests;
  for (int i = 0; i < kAccepted; ++i) {
    requests.push_back(SmallRequest(graph, absl::StrCat("accepted-", i), 70 + i));
  }
  InferenceCore* core = server_->core();
  StreamCall stream(*stub_);
  for (const CheckedRequest& request : requests) ASSERT_TRUE(stream.Write(request.request));
  ASSERT_TRUE(gate->AwaitHeld(2, kPatience));
  ASSERT_TRUE(Eventually([core] { return core->accepted() == kAccepted; }, kPatience));

  absl::Notification shut_down;
  std::thread stopper([&] {
    server_->server()->Shutdown(absl::Seconds(30));
    shut_down.Notify();
  });
  absl::Cleanup join_stopper = [&] {
    gate->Open();
    stream.Cancel();  // on an early failure, so the grace period is not waited out
    stopper.join();
  };
  ASSERT_TRUE(Eventually([core] { return !core->ready(); }, kPatience));
  // During the drain the stream still reads; a new request is refused, in
  // the stream, while the accepted ones are held.
  ASSERT_TRUE(stream.Write(SmallRequest(graph, "late", 80).request));
  ASSERT_TRUE(stream.AwaitResponses(1, kPatience));
  const inference::ModelStreamInferResponse refused = stream.responses()[0];
  EXPECT_EQ(refused.infer_response().id(), "late");
  EXPECT_EQ(refused.error_message(), "UNAVAILABLE: the server is shutting down");
  EXPECT_EQ(gate->held(), 2);
  EXPECT_FALSE(shut_down.HasBeenNotified());

  gate->Open();
  ASSERT_TRUE(stream.AwaitResponses(kAccepted + 1, kPatience));
  ASSERT_TRUE(stream.WritesDone());
  const grpc::Status status = stream.Finish(kPatience);
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_TRUE(shut_down.WaitForNotificationWithTimeout(kPatience));
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(stream.responses());
  ASSERT_EQ(by_id.size(), kAccepted + 1);
  for (const CheckedRequest& request : requests) {
    ASSERT_EQ(by_id.count(request.request.id()), 1u) << request.request.id();
    EXPECT_TRUE(AnswersCorrectly(by_id.at(request.request.id()), request)) << request.request.id();
  }
  EXPECT_EQ(core->accepted(), kAccepted);
  EXPECT_EQ(core->answered(), kAccepted);
}

TEST_F(KServeStreamTest, ShutdownWithoutGraceEndsAnOpenStreamAfterAnsweringAcceptedRequests) {
  auto gate = std::make_shared<BackendGate>();
  GatedBackendOptions gated;
  gated.run = gate;
  StartServer(GatedBackend::AroundCpu(gated));
  absl::Cleanup open_gate = [gate] { gate->Open(); };
  const v1::GraphDef graph = SmallGraph("small");
  Load(graph);
  constexpr int kAccepted = 3;
  std::vector<CheckedRequest> requests;
  for (int i = 0; i < kAccepted; ++i) {
    requests.push_back(SmallRequest(graph, absl::StrCat("accepted-", i), 90 + i));
  }
  InferenceCore* core = server_->core();
  StreamCall stream(*stub_);
  for (const CheckedRequest& request : requests) ASSERT_TRUE(stream.Write(request.request));
  ASSERT_TRUE(gate->AwaitHeld(2, kPatience));
  ASSERT_TRUE(Eventually([core] { return core->accepted() == kAccepted; }, kPatience));

  // The client never half-closes: the server cuts the stream off once the
  // accepted requests have been answered.
  absl::Notification shut_down;
  std::thread stopper([&] {
    server_->server()->Shutdown(absl::ZeroDuration());
    shut_down.Notify();
  });
  absl::Cleanup join_stopper = [&] {
    gate->Open();
    stopper.join();
  };
  ASSERT_TRUE(Eventually([core] { return !core->ready(); }, kPatience));
  EXPECT_FALSE(shut_down.HasBeenNotified());
  gate->Open();
  ASSERT_TRUE(shut_down.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(core->accepted(), kAccepted);
  EXPECT_EQ(core->answered(), kAccepted);
  const grpc::Status status = stream.Finish(kPatience);
  EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_FALSE(status.ok());
  // What reached the client before the cut is correct and answered once.
  const std::map<std::string, inference::ModelStreamInferResponse> by_id = ById(stream.responses());
  for (const CheckedRequest& request : requests) {
    if (by_id.count(request.request.id()) == 0) continue;
    EXPECT_TRUE(AnswersCorrectly(by_id.at(request.request.id()), request)) << request.request.id();
  }
  std::printf(
      "[ FIGURES ] shutdown without grace: %d accepted, %lld answered by the backend, "
      "%zu responses reached the client before the stream ended with %d (%s)\n",
      kAccepted, static_cast<long long>(core->answered()), by_id.size(),
      static_cast<int>(status.error_code()), status.error_message().c_str());
}

}  // namespace
}  // namespace convserve
