// A request whose client cancelled or whose deadline passed stops at the next
// layer boundary and frees its worker. On a real server with two request
// threads, two heavy requests with a 0.3 s deadline (one per protocol) must
// come back DEADLINE_EXCEEDED, stop in the server about one layer after their
// deadline, and hold up a small request sent right behind them by no more
// than that. Every bound is relative to T, the time of one heavy layer,
// measured first on the same server, so the test holds on a slow or loaded
// machine; the heavy graph has so many layers that running it to the end
// breaks every bound by seconds.
#include <grpc/grpc.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util/instrumented_backend.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Milliseconds(300);
// Request worker threads, as in the measured problem: two heavy requests
// occupy both, so the small one waits for a heavy one to stop.
constexpr int kRequestThreads = 2;
// One heavy layer: 96 -> 96 channels, 3x3 pad 1, on 1x96x64x64 float32, so
// every layer keeps the shape; about 0.1-0.2 s on two CPU threads.
constexpr int kChannels = 96;
constexpr int kExtent = 64;
// The heavy graph runs at least this long on an idle server (and twice that
// when both heavy requests share the CPU), whatever T is here, and has at
// least kMinHeavyLayers layers.
constexpr absl::Duration kHeavyRunTime = absl::Milliseconds(2400);
constexpr int kMinHeavyLayers = 16;
// Scheduling noise on a loaded 2-core machine: gRPC delivering the
// cancellation, threads waking, the small request's own few milliseconds.
constexpr absl::Duration kSlack = absl::Milliseconds(200);
// gRPC carries the deadline to the server in whole milliseconds, so the
// server may see it pass a millisecond or two before the client does.
constexpr absl::Duration kDeadlineRounding = absl::Milliseconds(5);
// Bounded waits for things that take well under a second when all is well.
constexpr absl::Duration kPatience = absl::Seconds(30);

v1::GraphDef ChainGraph(const std::string& name, int layers, int channels, uint64_t seed) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(channels);
  for (int i = 0; i < layers; ++i) {
    v1::ConvLayer* layer = graph.add_layers();
    layer->set_out_channels(channels);
    for (int d = 0; d < 2; ++d) {
      layer->add_kernel_size(3);
      layer->add_pad_before(1);
      layer->add_pad_after(1);
    }
    layer->mutable_activation()->set_kind(v1::Activation::TANH);
  }
  const absl::Status filled = FillParameters(seed, /*with_bias=*/true, &graph);
  EXPECT_TRUE(filled.ok()) << filled;
  return graph;
}

v1::InferRequest ChainInfer(const std::string& graph, int channels, int extent, uint64_t seed) {
  v1::InferRequest request;
  request.set_graph(graph);
  v1::Tensor* input = request.mutable_input();
  for (int64_t d : {1, channels, extent, extent}) input->add_shape(d);
  input->set_data(RandomTensorBytes(v1::FLOAT32, int64_t{channels} * extent * extent, seed));
  return request;
}

inference::ModelInferRequest ChainModelInfer(const std::string& model, int channels, int extent,
                                             uint64_t seed) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : {1, channels, extent, extent}) input->add_shape(d);
  request.add_raw_input_contents(
      RandomTensorBytes(v1::FLOAT32, int64_t{channels} * extent * extent, seed));
  return request;
}

// One asynchronous call and its outcome.
struct PendingCall {
  grpc::ClientContext context;
  absl::Notification done;
  grpc::Status status;
};

class CancellationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InstrumentedBackendOptions backend;
    log_ = backend.log;
    InferenceCoreOptions options;
    options.executor.threads = kRequestThreads;
    server_ = TestServer::Start(options, InstrumentedBackend::AroundCpu(backend));
    ClientOptions client;
    client.address = server_->address();
    client.timeout = absl::ToChronoMilliseconds(kPatience);
    client_ = std::make_unique<ConvServeClient>(client);
  }

  void Load(const v1::GraphDef& graph) {
    absl::StatusOr<v1::LoadGraphResponse> loaded = client_->LoadGraph(graph);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }

  // T: the longest of three uncancelled one-layer runs (after one warm-up),
  // as the server's worker timed them. The longest, so a noisy machine widens
  // the bounds rather than failing them.
  absl::Duration MeasureLayerTime() {
    Load(ChainGraph("one_layer", 1, kChannels, 1));
    const v1::InferRequest request = ChainInfer("one_layer", kChannels, kExtent, 2);
    absl::Duration longest;
    for (int i = 0; i < 4; ++i) {
      const int before = log_->started();
      absl::StatusOr<v1::InferResponse> response = client_->Infer(request);
      EXPECT_TRUE(response.ok()) << response.status();
      EXPECT_TRUE(log_->AwaitEnded(before + 1, kPatience));
      const RunLog::Run run = log_->ended().back();
      if (i > 0) longest = std::max(longest, run.end - run.start);
    }
    return longest;
  }

  // Loads "heavy": layers of one_layer's shape and cost, enough of them to
  // run at least kHeavyRunTime when each takes `layer`. Returns how many.
  int LoadHeavy(absl::Duration layer) {
    const int layers = std::max(
        kMinHeavyLayers, static_cast<int>(std::ceil(absl::FDivDuration(kHeavyRunTime, layer))));
    Load(ChainGraph("heavy", layers, kChannels, 3));
    return layers;
  }

  std::shared_ptr<RunLog> log_;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<ConvServeClient> client_;
};

TEST_F(CancellationTest, ExpiredRequestsStopAtTheNextLayerAndFreeTheirWorkers) {
  const absl::Duration layer = MeasureLayerTime();
  ASSERT_GT(layer, absl::ZeroDuration());
  const int heavy_layers = LoadHeavy(layer);
  Load(ChainGraph("small", 1, 4, 4));
  const v1::InferRequest small = ChainInfer("small", 4, 8, 5);
  ASSERT_TRUE(client_->Infer(small).ok());  // warm: its latency below is queueing plus running

  const v1::InferRequest heavy_v1 = ChainInfer("heavy", kChannels, kExtent, 6);
  const inference::ModelInferRequest heavy_kserve =
      ChainModelInfer("heavy", kChannels, kExtent, 7);
  v1::InferResponse heavy_v1_response;
  inference::ModelInferResponse heavy_kserve_response;
  PendingCall calls[2];
  const int runs_before = log_->started();
  const absl::Time heavy_sent = absl::Now();
  for (PendingCall& call : calls) {
    call.context.set_deadline(absl::ToChronoTime(heavy_sent + kDeadline));
  }
  client_->InferAsync(&calls[0].context, &heavy_v1, &heavy_v1_response, [&](grpc::Status s) {
    calls[0].status = std::move(s);
    calls[0].done.Notify();
  });
  client_->ModelInferAsync(&calls[1].context, &heavy_kserve, &heavy_kserve_response,
                           [&](grpc::Status s) {
                             calls[1].status = std::move(s);
                             calls[1].done.Notify();
                           });
  // However the test ends, no callback may outlive `calls`.
  absl::Cleanup settle = [&calls] {
    for (PendingCall& call : calls) {
      call.context.TryCancel();
      call.done.WaitForNotification();
    }
  };
  // Both workers busy with heavy runs, so the small request queues behind them.
  ASSERT_TRUE(log_->AwaitStarted(runs_before + 2, kPatience));
  const absl::Time small_sent = absl::Now();
  absl::StatusOr<v1::InferResponse> small_response = client_->Infer(small);
  const absl::Duration small_latency = absl::Now() - small_sent;
  EXPECT_TRUE(small_response.ok()) << small_response.status();

  for (PendingCall& call : calls) {
    ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(kPatience));
    EXPECT_EQ(call.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << call.status.error_message();
  }
  ASSERT_TRUE(log_->AwaitEnded(runs_before + 3, kPatience));
  std::vector<RunLog::Run> runs = log_->ended();
  runs.erase(runs.begin(), runs.end() - 3);

  // A heavy run may be one layer in when its deadline passes, and a layer
  // takes up to 2 T while both heavy runs share the CPU.
  const absl::Duration bound = kDeadline + 2 * layer + kSlack;
  std::printf("[ FIGURES ] T (one heavy layer) %.3f s; heavy graph %d layers (>= %.1f s "
              "uncancelled); bound deadline + 2 T + slack = %.3f s\n",
              absl::ToDoubleSeconds(layer), heavy_layers,
              absl::ToDoubleSeconds(heavy_layers * layer), absl::ToDoubleSeconds(bound));
  std::printf("[ FIGURES ] small request latency %.3f s\n", absl::ToDoubleSeconds(small_latency));
  int stopped = 0;
  for (const RunLog::Run& run : runs) {
    if (run.status.ok()) continue;  // the small request
    ++stopped;
    const absl::Duration stop = run.end - heavy_sent;
    std::printf("[ FIGURES ] heavy run stopped %.3f s after it was sent: %s\n",
                absl::ToDoubleSeconds(stop), std::string(run.status.message()).c_str());
    EXPECT_EQ(run.status.code(), absl::StatusCode::kCancelled) << run.status;
    EXPECT_THAT(std::string(run.status.message()),
                HasSubstr(absl::StrCat(" of ", heavy_layers,
                                       ": the client cancelled or the deadline passed")));
    // Stopped because of the deadline, not before it...
    EXPECT_GE(stop, kDeadline - kDeadlineRounding);
    // ...and within about a layer of it.
    EXPECT_LE(stop, bound);
  }
  EXPECT_EQ(stopped, 2);
  EXPECT_LE(small_latency, bound);
}

TEST_F(CancellationTest, ClientCancelStopsARunningRequestAtTheNextLayer) {
  const absl::Duration layer = MeasureLayerTime();
  ASSERT_GT(layer, absl::ZeroDuration());
  const int heavy_layers = LoadHeavy(layer);
  const v1::InferRequest heavy = ChainInfer("heavy", kChannels, kExtent, 6);
  v1::InferResponse response;
  PendingCall call;
  call.context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  const int runs_before = log_->started();
  client_->InferAsync(&call.context, &heavy, &response, [&call](grpc::Status s) {
    call.status = std::move(s);
    call.done.Notify();
  });
  // However the test ends, the callback may not outlive `call`.
  absl::Cleanup settle = [&call] {
    call.context.TryCancel();
    call.done.WaitForNotification();
  };
  ASSERT_TRUE(log_->AwaitStarted(runs_before + 1, kPatience));
  const absl::Time cancelled = absl::Now();
  call.context.TryCancel();
  ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(log_->AwaitEnded(runs_before + 1, kPatience));
  const RunLog::Run run = log_->ended().back();
  const absl::Duration stop = run.end - cancelled;
  const absl::Duration bound = 2 * layer + kSlack;
  std::printf("[ FIGURES ] T %.3f s; heavy graph %d layers; client cancelled: run stopped "
              "%.3f s later (bound 2 T + slack = %.3f s): %s\n",
              absl::ToDoubleSeconds(layer), heavy_layers, absl::ToDoubleSeconds(stop),
              absl::ToDoubleSeconds(bound), run.status.ToString().c_str());
  EXPECT_EQ(run.status.code(), absl::StatusCode::kCancelled) << run.status;
  EXPECT_LE(stop, bound);
}

// A client that died or lost its network never cancels, so the server must
// see the deadline pass by itself (gRPC sends it along as grpc-timeout). A
// channel with deadline checks off does not cancel at its own deadline, so
// here only the server's view of the deadline can stop the run.
TEST_F(CancellationTest, ServerStopsARequestAtItsDeadlineWithoutTheClientCancelling) {
  const absl::Duration layer = MeasureLayerTime();
  ASSERT_GT(layer, absl::ZeroDuration());
  const int heavy_layers = LoadHeavy(layer);
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 0);
  std::unique_ptr<v1::ConvServe::Stub> stub = v1::ConvServe::NewStub(grpc::CreateCustomChannel(
      server_->address(), grpc::InsecureChannelCredentials(), arguments));
  const v1::InferRequest heavy = ChainInfer("heavy", kChannels, kExtent, 6);
  const int runs_before = log_->started();
  grpc::ClientContext context;
  const absl::Time sent = absl::Now();
  context.set_deadline(absl::ToChronoTime(sent + kDeadline));
  v1::InferResponse response;
  const grpc::Status status = stub->Infer(&context, heavy, &response);
  const absl::Duration answered = absl::Now() - sent;
  ASSERT_TRUE(log_->AwaitEnded(runs_before + 1, kPatience));
  const RunLog::Run run = log_->ended().back();
  const absl::Duration stop = run.end - sent;
  const absl::Duration bound = kDeadline + 2 * layer + kSlack;
  std::printf("[ FIGURES ] T %.3f s; heavy graph %d layers; client without deadline checks: "
              "answered code %d after %.3f s; run stopped %.3f s after it was sent "
              "(bound deadline + 2 T + slack = %.3f s): %s\n",
              absl::ToDoubleSeconds(layer), heavy_layers,
              static_cast<int>(status.error_code()),
              absl::ToDoubleSeconds(answered), absl::ToDoubleSeconds(stop),
              absl::ToDoubleSeconds(bound), run.status.ToString().c_str());
  EXPECT_EQ(run.status.code(), absl::StatusCode::kCancelled) << run.status;
  EXPECT_GE(stop, kDeadline - kDeadlineRounding);
  EXPECT_LE(stop, bound);
}

}  // namespace
}  // namespace convserve
