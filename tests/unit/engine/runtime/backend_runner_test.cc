// BackendRunner's graph references (RequestRunner's contract: each AddGraph
// is matched by one RemoveGraph): an identical graph loaded again, whose
// extra reference is released at once, keeps the executables compiled for
// the first; the last release drops them. Warm compiles a shape's executable
// before its first request, refuses a shape the graph cannot take, and
// stops when cancelled.
#include "engine/runtime/backend_runner.h"

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/small_graph.h"

namespace convserve {
namespace {

std::shared_ptr<const Graph> SmallGraph() {
  v1::GraphDef def = SmallConvGraph("referenced", 5);
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *graph;
}

// Runs one 1x3x8x8 request (compiling its executable on first use).
absl::Status RunOnce(BackendRunner& runner, const std::shared_ptr<const Graph>& graph) {
  InferCall call;
  call.graph = graph;
  call.input_shape = {1, 3, 8, 8};
  call.layer_outputs = *graph->InferShapes(call.input_shape);
  const std::string input(3 * 8 * 8 * sizeof(float), '\0');
  std::string output;
  call.input = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  call.output = &output;
  absl::Notification done;
  absl::Status result;
  call.done = [&](const absl::Status& status, const Shape&, const InferTimings&) {
    result = status;
    done.Notify();
  };
  runner.Submit(std::move(call));
  done.WaitForNotification();
  return result;
}

TEST(BackendRunnerTest, ExecutablesLastUntilTheLastReferenceIsReleased) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create({});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  BackendRunner runner(*std::move(cpu), RequestExecutorOptions());
  const std::shared_ptr<const Graph> graph = SmallGraph();
  ASSERT_TRUE(runner.AddGraph(graph).ok());
  ASSERT_TRUE(RunOnce(runner, graph).ok());
  EXPECT_EQ(runner.Stats().plans.entries, 1);

  // The same graph loaded again, its extra reference released at once.
  ASSERT_TRUE(runner.AddGraph(graph).ok());
  runner.RemoveGraph(graph->id());
  EXPECT_EQ(runner.Stats().plans.entries, 1) << "a reload dropped the graph's executables";
  ASSERT_TRUE(RunOnce(runner, graph).ok());
  EXPECT_EQ(runner.Stats().plans.misses, 1);

  runner.RemoveGraph(graph->id());
  EXPECT_EQ(runner.Stats().plans.entries, 0);
}

TEST(BackendRunnerTest, WarmCompilesBeforeTheFirstRequest) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create({});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  BackendRunner runner(*std::move(cpu), RequestExecutorOptions());
  const std::shared_ptr<const Graph> graph = SmallGraph();
  ASSERT_TRUE(runner.AddGraph(graph).ok());
  ASSERT_TRUE(runner.Warm(graph, {1, 3, 8, 8}, nullptr).ok());
  EXPECT_EQ(runner.Stats().plans.misses, 1);
  ASSERT_TRUE(RunOnce(runner, graph).ok());
  EXPECT_EQ(runner.Stats().plans.misses, 1) << "the warmed shape's first request compiled";
  EXPECT_EQ(runner.Stats().plans.hits, 1);

  const absl::Status too_small = runner.Warm(graph, {1, 3, 2, 2}, nullptr);
  EXPECT_EQ(too_small.code(), absl::StatusCode::kInvalidArgument) << too_small;
  const absl::Status stopped = runner.Warm(graph, {1, 3, 9, 9}, [] { return true; });
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled) << stopped;
  EXPECT_EQ(runner.Stats().plans.entries, 1);
  runner.RemoveGraph(graph->id());
}

}  // namespace
}  // namespace convserve
