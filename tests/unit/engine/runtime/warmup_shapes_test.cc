// The warm-up list of --warmup_shapes (server and convserve-load): parsing
// N:HxW and N:DxHxW entries, clear errors on malformed ones, the graph's
// input shape for an entry, and the batch shapes dynamic batching adds.
#include "engine/runtime/warmup_shapes.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/proto_convert.h"
#include "tests/test_util/small_graph.h"

namespace convserve {
namespace {

std::shared_ptr<const Graph> SmallGraph() {
  v1::GraphDef def = SmallConvGraph("warm", 1);
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&def);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *graph;
}

TEST(WarmupShapesTest, ParsesEntriesOfBothRanks) {
  absl::StatusOr<std::vector<WarmupSize>> sizes = ParseWarmupSizes("1:56x56, 8:28x30,2:4x8x8");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  ASSERT_EQ(sizes->size(), 3u);
  EXPECT_EQ((*sizes)[0].batch, 1);
  EXPECT_EQ((*sizes)[0].spatial, (std::vector<int64_t>{56, 56}));
  EXPECT_EQ((*sizes)[1].batch, 8);
  EXPECT_EQ((*sizes)[1].spatial, (std::vector<int64_t>{28, 30}));
  EXPECT_EQ((*sizes)[2].spatial, (std::vector<int64_t>{4, 8, 8}));
  EXPECT_EQ(WarmupSizeToString((*sizes)[1]), "8:28x30");
}

TEST(WarmupShapesTest, EmptyTextIsNoWarmup) {
  absl::StatusOr<std::vector<WarmupSize>> sizes = ParseWarmupSizes("");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_TRUE(sizes->empty());
  sizes = ParseWarmupSizes("  ");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_TRUE(sizes->empty());
}

TEST(WarmupShapesTest, MalformedEntriesAreNamed) {
  struct Case {
    std::string text;
    std::string names;  // what the message must contain
  };
  for (const Case& c : std::vector<Case>{
           {"56x56", "'56x56' needs exactly one ':'"},
           {"1:56x56,", "is empty"},
           {"0:56x56", "N that is not a whole number >= 1"},
           {"a:56x56", "N that is not"},
           {"1:56", "has 1 spatial dims"},
           {"1:1x2x3x4", "has 4 spatial dims"},
           {"1:56x0", "spatial dim '0'"},
           {"1:56xq", "spatial dim 'q'"},
           {"1:2:3", "exactly one ':'"},
       }) {
    absl::StatusOr<std::vector<WarmupSize>> sizes = ParseWarmupSizes(c.text);
    ASSERT_FALSE(sizes.ok()) << c.text;
    EXPECT_EQ(sizes.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(sizes.status().message().find(c.names), std::string::npos)
        << c.text << ": " << sizes.status();
    EXPECT_NE(sizes.status().message().find("N:HxW"), std::string::npos) << sizes.status();
  }
}

TEST(WarmupShapesTest, InputShapeTakesTheGraphsChannels) {
  const std::shared_ptr<const Graph> graph = SmallGraph();
  absl::StatusOr<Shape> shape = WarmupInputShape(*graph, WarmupSize{4, {16, 12}});
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(*shape, (Shape{4, 3, 16, 12}));
  absl::StatusOr<Shape> other_rank = WarmupInputShape(*graph, WarmupSize{1, {4, 8, 8}});
  ASSERT_FALSE(other_rank.ok());
  EXPECT_EQ(other_rank.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other_rank.status().message().find("has 3 spatial dims"), std::string::npos)
      << other_rank.status();
}

TEST(WarmupShapesTest, WithoutBatchingOnlyTheInputs) {
  const std::vector<Shape> shapes =
      WarmupExecutionShapes({{1, 3, 8, 8}, {2, 3, 8, 8}, {1, 3, 8, 8}}, DynamicBatchingOptions());
  EXPECT_EQ(shapes, (std::vector<Shape>{{1, 3, 8, 8}, {2, 3, 8, 8}}));
}

TEST(WarmupShapesTest, BatchingAddsReachablePreferredSizesAndTheFullBatch) {
  DynamicBatchingOptions batching;
  batching.max_batch_size = 10;
  batching.preferred_batch_sizes = {4, 6, 3};
  // N=2: preferred 4 and 6 are reachable (3 is not), the full batch is 10.
  EXPECT_EQ(WarmupExecutionShapes({{2, 3, 8, 8}}, batching),
            (std::vector<Shape>{{2, 3, 8, 8}, {4, 3, 8, 8}, {6, 3, 8, 8}, {10, 3, 8, 8}}));
  // N=3: preferred 3 is the input itself, 6 is reachable; full batch 9.
  EXPECT_EQ(WarmupExecutionShapes({{3, 3, 8, 8}}, batching),
            (std::vector<Shape>{{3, 3, 8, 8}, {6, 3, 8, 8}, {9, 3, 8, 8}}));
  // N at or past the maximum runs alone.
  EXPECT_EQ(WarmupExecutionShapes({{10, 3, 8, 8}, {12, 3, 8, 8}}, batching),
            (std::vector<Shape>{{10, 3, 8, 8}, {12, 3, 8, 8}}));
}

}  // namespace
}  // namespace convserve
