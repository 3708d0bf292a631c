// The float64 reference computes its output channels on several threads:
// on seeded random graphs (every dtype, layout, grouping, geometry and
// activation the generator draws) it gives the same values, bit for bit,
// on one thread and on several; and the thread pool under it runs every
// index once.
#include "tests/test_util/naive_conv.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "engine/graph.h"
#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/for_each_on_threads.h"
#include "tests/test_util/random_graph.h"

namespace convserve {
namespace {

TEST(ForEachOnThreadsTest, RunsEveryIndexOnce) {
  for (int threads : {0, 1, 3, 64}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      std::vector<std::atomic<int>> runs(count);
      ForEachOnThreads(count, threads, [&](size_t i) { ++runs[i]; });
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(runs[i].load(), 1) << "index " << i << " of " << count << ", " << threads
                                     << " threads";
      }
    }
  }
}

TEST(NaiveForwardTest, ThreadsDoNotChangeTheValues) {
  RandomGraphOptions options;
  options.max_macs = 2'000'000;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const RandomGraphCase c = MakeRandomGraph(20261206 + seed, options);
    SCOPED_TRACE(c.description);
    v1::GraphDef copy = c.graph;
    absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
    ASSERT_TRUE(graph.ok()) << graph.status();
    Shape one_shape, many_shape;
    const std::vector<double> one =
        NaiveForward(**graph, c.input_shape, c.input, &one_shape, /*threads=*/1);
    const std::vector<double> many =
        NaiveForward(**graph, c.input_shape, c.input, &many_shape, /*threads=*/5);
    EXPECT_EQ(one_shape, many_shape);
    ASSERT_EQ(one.size(), many.size());
    ASSERT_FALSE(one.empty());
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(double)), 0);
  }
}

}  // namespace
}  // namespace convserve
