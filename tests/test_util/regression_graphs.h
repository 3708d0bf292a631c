// The regression graphs kept in tests/data/repro/: graphs that once crashed
// or corrupted a backend, each with the input shape it failed on. Their files
// hold no weights; parameters and inputs are drawn from a seed.
#ifndef CONVSERVE_TESTS_TEST_UTIL_REGRESSION_GRAPHS_H_
#define CONVSERVE_TESTS_TEST_UTIL_REGRESSION_GRAPHS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/test_util/random_graph.h"

namespace convserve {

// Every regression graph under `source_dir`/tests/data/repro/, twice: with a
// bias on every layer (named as in its file) and without biases (name +
// "_nobias"), since a bias changes which fused plan a GPU runs. NOT_FOUND or
// INVALID_ARGUMENT when a file is missing or does not accept its input.
absl::StatusOr<std::vector<RandomGraphCase>> RegressionGraphCases(const std::string& source_dir,
                                                                  uint64_t seed);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_REGRESSION_GRAPHS_H_
