// Warm-up at load on a CPU server (docs/runtime.md, "Warm-up at load"):
// LoadGraph waits for the warm-up or returns WARMING, KServe readiness turns
// true only once the graph is READY, the first request of a warmed shape
// builds nothing, shapes that do not fit are refused (requested) or reported
// as FAILED (the server's --warmup_shapes), an unload stops a warm-up, and
// the metrics count it. Builds are held at a gate on the backend's Compile
// where a test needs a warm-up in progress; no sleeps.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/runtime/warmup_shapes.h"
#include "tests/test_util/command.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/small_graph.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

v1::TensorShape ShapeProto(std::vector<int64_t> dims) {
  v1::TensorShape shape;
  for (int64_t d : dims) shape.add_dims(d);
  return shape;
}

std::vector<int64_t> Dims(const v1::TensorShape& shape) {
  return std::vector<int64_t>(shape.dims().begin(), shape.dims().end());
}

// LoadGraph of the small graph (C=3, 3x3 kernel) with these warm-up shapes.
v1::LoadGraphRequest LoadRequest(const std::string& name,
                                 const std::vector<std::vector<int64_t>>& shapes,
                                 bool return_before_ready = false) {
  v1::LoadGraphRequest request;
  *request.mutable_graph() = SmallConvGraph(name, 7);
  for (const auto& dims : shapes) *request.mutable_warmup()->add_shapes() = ShapeProto(dims);
  request.mutable_warmup()->set_return_before_ready(return_before_ready);
  return request;
}

v1::InferRequest Request(const std::string& graph, std::vector<int64_t> dims) {
  v1::InferRequest request;
  request.set_graph(graph);
  int64_t elements = 1;
  for (int64_t d : dims) {
    request.mutable_input()->add_shape(d);
    elements *= d;
  }
  request.mutable_input()->set_data(RandomTensorBytes(v1::FLOAT32, elements, 3));
  return request;
}

// A CPU server whose plan builds (compiles) wait at `gate`.
std::unique_ptr<TestServer> ServerWithGatedCompiles(std::shared_ptr<BackendGate> gate) {
  GatedBackendOptions gated;
  gated.compile = std::move(gate);
  return TestServer::Start(InferenceCoreOptions(), GatedBackend::AroundCpu(gated));
}

int64_t PlanMisses(TestServer& server) {
  return server.core()->runner().Stats().plans.misses;
}

TEST(WarmupTest, LoadGraphWaitsAndTheFirstRequestBuildsNothing) {
  std::unique_ptr<TestServer> server = TestServer::Start();
  ConvServeClient client(server->client_options());
  absl::StatusOr<v1::LoadGraphResponse> loaded =
      client.LoadGraph(LoadRequest("warm", {{1, 3, 8, 8}, {2, 3, 10, 12}}));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->graph().state(), v1::GraphInfo::READY);
  ASSERT_EQ(loaded->graph().warmup_shapes_size(), 2);
  EXPECT_EQ(Dims(loaded->graph().warmup_shapes(0)), (std::vector<int64_t>{1, 3, 8, 8}));
  EXPECT_EQ(Dims(loaded->graph().warmup_shapes(1)), (std::vector<int64_t>{2, 3, 10, 12}));
  EXPECT_GT(loaded->graph().warmup_seconds(), 0);
  EXPECT_EQ(loaded->graph().warmup_error(), "");
  EXPECT_EQ(PlanMisses(*server), 2);  // one executable per warmed shape
  EXPECT_EQ(client.ModelReady("warm").value_or(false), true);
  EXPECT_EQ(client.ServerReady().value_or(false), true);

  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{1, 3, 8, 8}, std::vector<int64_t>{2, 3, 10, 12}}) {
    absl::StatusOr<v1::InferResponse> answer = client.Infer(Request("warm", dims));
    ASSERT_TRUE(answer.ok()) << answer.status();
  }
  EXPECT_EQ(PlanMisses(*server), 2) << "a warmed shape's first request built a plan";
  // A shape that was not warmed up builds its plan on first use, as before.
  ASSERT_TRUE(client.Infer(Request("warm", {1, 3, 9, 9})).ok());
  EXPECT_EQ(PlanMisses(*server), 3);

  absl::StatusOr<v1::GraphInfo> info = client.GetGraph("warm");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), v1::GraphInfo::READY);
  EXPECT_EQ(info->warmup_shapes_size(), 2);
  const std::string page = server->server()->metrics().Render();
  EXPECT_THAT(page, HasSubstr("convserve_graph_warmup_duration_seconds_count{result=\"ok\"} 1"));
  EXPECT_THAT(page, HasSubstr("convserve_graph_warmup_duration_seconds_count{result=\"error\"} 0"));
  EXPECT_THAT(page, HasSubstr("convserve_warming_graphs 0"));
}

TEST(WarmupTest, NoWarmupIsReadyAtOnce) {
  std::unique_ptr<TestServer> server = TestServer::Start();
  ConvServeClient client(server->client_options());
  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(SmallConvGraph("plain", 1));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->graph().state(), v1::GraphInfo::READY);
  EXPECT_EQ(loaded->graph().warmup_shapes_size(), 0);
  EXPECT_EQ(loaded->graph().warmup_seconds(), 0);
  EXPECT_EQ(PlanMisses(*server), 0);
  EXPECT_EQ(client.ModelReady("plain").value_or(false), true);
}

TEST(WarmupTest, ReturnBeforeReadyReportsWarmingUntilTheWarmupEnds) {
  auto gate = std::make_shared<BackendGate>();
  std::unique_ptr<TestServer> server = ServerWithGatedCompiles(gate);
  ConvServeClient client(server->client_options());
  // Another graph, ready before: its readiness is its own.
  ASSERT_TRUE(client.LoadGraph(SmallConvGraph("other", 2)).ok());

  absl::StatusOr<v1::LoadGraphResponse> loaded =
      client.LoadGraph(LoadRequest("slow", {{1, 3, 8, 8}}, /*return_before_ready=*/true));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->graph().state(), v1::GraphInfo::WARMING);
  ASSERT_TRUE(gate->AwaitHeld(1, kWait));
  EXPECT_EQ(client.ModelReady("slow").value_or(true), false);
  EXPECT_EQ(client.ServerReady().value_or(true), false);
  EXPECT_EQ(client.ModelReady("other").value_or(false), true);
  absl::StatusOr<v1::GraphInfo> info = client.GetGraph("slow");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), v1::GraphInfo::WARMING);
  EXPECT_THAT(server->server()->metrics().Render(), HasSubstr("convserve_warming_graphs 1"));

  // A request of the warming graph is served: it waits for the warm-up's
  // build of its plan (one build, single-flight) rather than being refused.
  absl::Notification answered;
  absl::Status infer_status;
  std::thread request([&] {
    infer_status = client.Infer(Request("slow", {1, 3, 8, 8})).status();
    answered.Notify();
  });
  // A second LoadGraph that waits returns once the warm-up has ended.
  absl::StatusOr<v1::LoadGraphResponse> waited;
  std::thread loader([&] { waited = client.LoadGraph(LoadRequest("slow", {{1, 3, 8, 8}})); });
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  gate->Open();
  loader.join();
  request.join();
  EXPECT_TRUE(infer_status.ok()) << infer_status;
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(waited->already_loaded());
  EXPECT_EQ(waited->graph().state(), v1::GraphInfo::READY);
  EXPECT_EQ(client.ModelReady("slow").value_or(false), true);
  EXPECT_EQ(client.ServerReady().value_or(false), true);
  EXPECT_EQ(PlanMisses(*server), 1);
}

TEST(WarmupTest, RequestedShapesThatDoNotFitAreRefusedAndLoadNothing) {
  InferenceCoreOptions options;
  options.max_request_flops = 1e6;
  std::unique_ptr<TestServer> server = TestServer::Start(options);
  ConvServeClient client(server->client_options());
  struct Case {
    std::vector<int64_t> dims;
    std::string names;
  };
  for (const Case& c : std::vector<Case>{
           {{1, 3, 8}, "warmup.shapes[0] [1, 3, 8] of graph 'bad' has 3 dims; the graph takes 4"},
           {{1, 4, 8, 8}, "has C=4; the graph's input_channels is 3"},
           {{1, 3, 2, 2}, "warmup.shapes[0] [1, 3, 2, 2] of graph 'bad': "},
           {{0, 3, 8, 8}, "warmup.shapes[0] [0, 3, 8, 8]"},
           {{64, 3, 64, 64}, "--max_request_flops"},
       }) {
    absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(LoadRequest("bad", {c.dims}));
    ASSERT_FALSE(loaded.ok()) << c.names;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.names));
    EXPECT_EQ(client.GetGraph("bad").status().code(), absl::StatusCode::kNotFound);
  }
  std::vector<std::vector<int64_t>> many;
  for (int64_t h = 8; h < 8 + 65; ++h) many.push_back({1, 3, h, 8});
  absl::StatusOr<v1::LoadGraphResponse> too_many = client.LoadGraph(LoadRequest("bad", many));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_many.status().message()), HasSubstr("names 65 shapes; at most 64"));
  v1::LoadGraphRequest both = LoadRequest("bad", {{1, 3, 8, 8}});
  both.mutable_warmup()->set_disabled(true);
  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(both);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("disabled but names 1 shape"));
  EXPECT_EQ(PlanMisses(*server), 0);
}

TEST(WarmupTest, ServerDefaultsApplyAndAnUnfitOneFailsOnlyItsGraph) {
  InferenceCoreOptions options;
  // 1:4x8x8 is for 3-D graphs (skipped here); 1:2x2 is smaller than the
  // small graph's 3x3 kernel.
  absl::StatusOr<std::vector<WarmupSize>> sizes = ParseWarmupSizes("1:8x8,1:4x8x8,1:2x2");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  options.default_warmup = *sizes;
  std::unique_ptr<TestServer> server = TestServer::Start(options);
  ConvServeClient client(server->client_options());

  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(SmallConvGraph("defaults", 3));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::GraphInfo& info = loaded->graph();
  EXPECT_EQ(info.state(), v1::GraphInfo::FAILED);
  ASSERT_EQ(info.warmup_shapes_size(), 2);
  EXPECT_EQ(Dims(info.warmup_shapes(0)), (std::vector<int64_t>{1, 3, 8, 8}));
  EXPECT_EQ(Dims(info.warmup_shapes(1)), (std::vector<int64_t>{1, 3, 2, 2}));
  EXPECT_THAT(info.warmup_error(), HasSubstr("input [1, 3, 2, 2]: INVALID_ARGUMENT"));
  EXPECT_THAT(info.warmup_error(), ::testing::Not(HasSubstr("[1, 3, 8, 8]")));
  EXPECT_EQ(client.ModelReady("defaults").value_or(true), false);
  // A FAILED warm-up does not hold the server's readiness back, and the
  // graph still serves the shapes that work (the warmed one builds nothing).
  EXPECT_EQ(client.ServerReady().value_or(false), true);
  const int64_t misses = PlanMisses(*server);
  ASSERT_TRUE(client.Infer(Request("defaults", {1, 3, 8, 8})).ok());
  EXPECT_EQ(PlanMisses(*server), misses);
  EXPECT_THAT(server->server()->metrics().Render(),
              HasSubstr("convserve_graph_warmup_duration_seconds_count{result=\"error\"} 1"));

  // Other graphs load and warm up as usual; a LoadGraph's own shapes replace
  // the defaults, and disabled warms up nothing.
  absl::StatusOr<v1::LoadGraphResponse> own = client.LoadGraph(LoadRequest("own", {{1, 3, 9, 9}}));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->graph().state(), v1::GraphInfo::READY);
  ASSERT_EQ(own->graph().warmup_shapes_size(), 1);
  EXPECT_EQ(Dims(own->graph().warmup_shapes(0)), (std::vector<int64_t>{1, 3, 9, 9}));
  v1::LoadGraphRequest disabled;
  *disabled.mutable_graph() = SmallConvGraph("cold", 4);
  disabled.mutable_warmup()->set_disabled(true);
  absl::StatusOr<v1::LoadGraphResponse> cold = client.LoadGraph(disabled);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->graph().state(), v1::GraphInfo::READY);
  EXPECT_EQ(cold->graph().warmup_shapes_size(), 0);
}

TEST(WarmupTest, DynamicBatchingWarmsTheBatchesItForms) {
  std::unique_ptr<TestServer> server = TestServer::Start();
  ConvServeClient client(server->client_options());
  v1::LoadGraphRequest request = LoadRequest("batched", {{1, 3, 8, 8}});
  request.mutable_dynamic_batching()->set_max_batch_size(8);
  request.mutable_dynamic_batching()->add_preferred_batch_size(4);
  absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(request);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->graph().warmup_shapes_size(), 3);
  EXPECT_EQ(Dims(loaded->graph().warmup_shapes(1)), (std::vector<int64_t>{4, 3, 8, 8}));
  EXPECT_EQ(Dims(loaded->graph().warmup_shapes(2)), (std::vector<int64_t>{8, 3, 8, 8}));
  EXPECT_EQ(PlanMisses(*server), 3);
}

TEST(WarmupTest, UnloadStopsTheWarmupAndAnswersItsWaiters) {
  auto gate = std::make_shared<BackendGate>();
  std::unique_ptr<TestServer> server = ServerWithGatedCompiles(gate);
  ConvServeClient client(server->client_options());
  absl::StatusOr<v1::LoadGraphResponse> waited;
  std::thread loader(
      [&] { waited = client.LoadGraph(LoadRequest("gone", {{1, 3, 8, 8}, {1, 3, 9, 9}})); });
  ASSERT_TRUE(gate->AwaitHeld(1, kWait));  // building the first shape
  // The unload returns once the warm-up has stopped, after the build in
  // progress: it is let through only once the graph is out of the registry.
  absl::Status unloaded;
  std::thread unloader([&] { unloaded = client.UnloadGraph("gone"); });
  const absl::Time deadline = absl::Now() + kWait;
  while (client.GetGraph("gone").ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling the observable state, bounded
  }
  EXPECT_EQ(client.GetGraph("gone").status().code(), absl::StatusCode::kNotFound);
  gate->Open();
  unloader.join();
  loader.join();
  EXPECT_TRUE(unloaded.ok()) << unloaded;
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(waited.status().message()),
              HasSubstr("graph 'gone' was unloaded during its warm-up"));
  EXPECT_EQ(gate->passed(), 1) << "the second shape was built after the unload";
  EXPECT_EQ(server->core()->runner().Stats().plans.entries, 0);
  // Loaded again, it warms up afresh.
  absl::StatusOr<v1::LoadGraphResponse> again =
      client.LoadGraph(LoadRequest("gone", {{1, 3, 8, 8}}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->graph().state(), v1::GraphInfo::READY);
}

TEST(WarmupTest, ServerFlagIsCheckedAtStart) {
  CommandResult bad = RunCommand({CONVSERVE_SERVER_BINARY, "--listen=127.0.0.1:0",
                                  "--metrics_listen=", "--backend=cpu", "--warmup_shapes=1:56"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--warmup_shapes: warm-up shape '1:56' has 1 spatial dims"));
}

}  // namespace
}  // namespace convserve
