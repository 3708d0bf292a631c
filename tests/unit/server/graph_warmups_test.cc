// GraphWarmups over the CPU runner, builds held at a gate on Compile: shapes
// added while a warm-up runs are warmed by the same run, the state goes
// WARMING -> READY (or FAILED naming the shape), waiters hear the end,
// Remove stops a run after the build in progress and answers its waiters
// ABORTED, Stop answers UNAVAILABLE. Bounded waits, no sleeps.
#include "server/graph_warmups.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "engine/runtime/backend_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/gated_backend.h"
#include "tests/test_util/small_graph.h"

namespace convserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

std::shared_ptr<const Graph> SmallGraph() {
  v1::GraphDef def = SmallConvGraph("warmed", 9);
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *graph;
}

struct Fixture {
  std::shared_ptr<BackendGate> gate = std::make_shared<BackendGate>();
  std::unique_ptr<BackendRunner> runner;
  std::shared_ptr<const Graph> graph = SmallGraph();

  Fixture() {
    GatedBackendOptions gated;
    gated.compile = gate;
    runner = std::make_unique<BackendRunner>(GatedBackend::AroundCpu(gated),
                                             RequestExecutorOptions());
    EXPECT_TRUE(runner->AddGraph(graph).ok());
  }
};

TEST(GraphWarmupsTest, ShapesAddedWhileRunningAreWarmedByTheSameRun) {
  Fixture f;
  GraphWarmups warmups(f.runner.get());
  std::vector<WarmupEvent> events;
  warmups.set_observer([&events](const WarmupEvent& event) { events.push_back(event); });
  EXPECT_EQ(warmups.Get(f.graph->id()).state, WarmupState::kReady);
  warmups.Start(f.graph, {{1, 3, 8, 8}});
  ASSERT_TRUE(f.gate->AwaitHeld(1, kWait));
  EXPECT_EQ(warmups.Get(f.graph->id()).state, WarmupState::kWarming);
  EXPECT_EQ(warmups.warming(), 1);
  warmups.Start(f.graph, {{1, 3, 8, 8}, {2, 3, 8, 8}});  // one new shape
  absl::Notification ended;
  absl::StatusOr<WarmupStatus> heard;
  warmups.WhenEnded(f.graph->id(), [&](absl::StatusOr<WarmupStatus> status) {
    heard = std::move(status);
    ended.Notify();
  });
  EXPECT_FALSE(ended.HasBeenNotified());
  f.gate->Open();
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_EQ(heard->state, WarmupState::kReady);
  EXPECT_EQ(heard->shapes, (std::vector<Shape>{{1, 3, 8, 8}, {2, 3, 8, 8}}));
  EXPECT_EQ(f.gate->passed(), 2);
  EXPECT_EQ(f.runner->Stats().plans.misses, 2);
  EXPECT_EQ(warmups.warming(), 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].ok);
  // Nothing new: no run, the state stays.
  warmups.Start(f.graph, {{2, 3, 8, 8}});
  EXPECT_EQ(warmups.Get(f.graph->id()).state, WarmupState::kReady);
  EXPECT_EQ(events.size(), 1u);
}

TEST(GraphWarmupsTest, AFailedShapeIsNamedAndTheOthersAreStillWarmed) {
  Fixture f;
  f.gate->Open();
  GraphWarmups warmups(f.runner.get());
  warmups.Start(f.graph, {{1, 3, 2, 2}, {1, 3, 8, 8}});
  absl::StatusOr<WarmupStatus> status = warmups.Wait(f.graph->id());
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state, WarmupState::kFailed);
  EXPECT_THAT(status->error, HasSubstr("input [1, 3, 2, 2]: INVALID_ARGUMENT"));
  EXPECT_EQ(f.runner->Stats().plans.entries, 1);  // the 8x8 one
}

TEST(GraphWarmupsTest, RemoveStopsAfterTheBuildInProgress) {
  Fixture f;
  GraphWarmups warmups(f.runner.get());
  warmups.Start(f.graph, {{1, 3, 8, 8}, {1, 3, 9, 9}});
  ASSERT_TRUE(f.gate->AwaitHeld(1, kWait));
  absl::Notification ended;
  absl::StatusOr<WarmupStatus> heard;
  warmups.WhenEnded(f.graph->id(), [&](absl::StatusOr<WarmupStatus> status) {
    heard = std::move(status);
    ended.Notify();
  });
  std::thread remover([&] { warmups.Remove(f.graph->id()); });
  // Remove waits for the build in progress, held at the gate.
  EXPECT_FALSE(ended.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  f.gate->Open();
  remover.join();
  ASSERT_TRUE(ended.HasBeenNotified()) << "Remove returned before the run ended";
  EXPECT_EQ(heard.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(f.gate->passed(), 1) << "a shape was built after the remove";
  EXPECT_EQ(warmups.Get(f.graph->id()).shapes.size(), 0u) << "the graph is forgotten";
}

TEST(GraphWarmupsTest, StopAnswersWaitersUnavailableAndRefusesNewRuns) {
  Fixture f;
  GraphWarmups warmups(f.runner.get());
  warmups.Start(f.graph, {{1, 3, 8, 8}, {1, 3, 9, 9}});
  ASSERT_TRUE(f.gate->AwaitHeld(1, kWait));
  warmups.Stop();
  f.gate->Open();
  absl::StatusOr<WarmupStatus> waited = warmups.Wait(f.graph->id());
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kUnavailable) << waited.status();
  warmups.Join();
  const WarmupStatus status = warmups.Get(f.graph->id());
  EXPECT_EQ(status.state, WarmupState::kFailed);
  EXPECT_THAT(status.error, HasSubstr("input [1, 3, 9, 9]: not warmed up: the server is shutting down"));
  warmups.Start(f.graph, {{1, 3, 10, 10}});
  EXPECT_EQ(warmups.warming(), 0);
  EXPECT_EQ(f.gate->passed(), 1);
}

}  // namespace
}  // namespace convserve
