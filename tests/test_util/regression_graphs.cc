#include "tests/test_util/regression_graphs.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/graph_file.h"

namespace convserve {
namespace {

struct RegressionGraph {
  // File under tests/data/repro/.
  const char* file;
  // Logical N, C, spatial... of the input it failed on.
  std::vector<int64_t> input_shape;
};

// Why each graph is kept is in its file's header comment.
const std::vector<RegressionGraph>& RegressionGraphs() {
  static const auto* graphs = new std::vector<RegressionGraph>{
      {"crash_a.textproto", {2, 7, 39, 35}},
      {"crash_b.textproto", {1, 5, 21, 14}},
      {"bf16_rounding.textproto", {1, 7, 13, 10}},
  };
  return *graphs;
}

}  // namespace

absl::StatusOr<std::vector<RandomGraphCase>> RegressionGraphCases(const std::string& source_dir,
                                                                  uint64_t seed) {
  std::vector<RandomGraphCase> cases;
  for (const RegressionGraph& regression : RegressionGraphs()) {
    absl::StatusOr<v1::GraphDef> graph =
        ReadGraphFile(absl::StrCat(source_dir, "/tests/data/repro/", regression.file));
    if (!graph.ok()) return graph.status();
    for (const bool with_bias : {true, false}) {
      v1::GraphDef named = *graph;
      if (!with_bias) named.set_name(absl::StrCat(graph->name(), "_nobias"));
      absl::StatusOr<RandomGraphCase> made =
          MakeGraphCase(std::move(named), regression.input_shape, seed, with_bias);
      if (!made.ok()) return made.status();
      cases.push_back(*std::move(made));
    }
  }
  return cases;
}

}  // namespace convserve
