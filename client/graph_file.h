// Graph definitions from text files, and made-up parameters and inputs for
// trying a graph out: weights from a seed, random input tensors.
#ifndef CONVSERVE_CLIENT_GRAPH_FILE_H_
#define CONVSERVE_CLIENT_GRAPH_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"

namespace convserve {

// Reads a GraphDef from protobuf text format, JSON when the path ends in
// ".json", or the binary wire form (weights inside, as LoadGraph sends it)
// when it ends in ".pb" or ".binpb". Errors name the file and, for text, the
// parser's line and column.
absl::StatusOr<v1::GraphDef> ReadGraphFile(const std::string& path);
// ReadGraphFile of bytes already read: `path` picks the form and names the
// file in errors.
absl::StatusOr<v1::GraphDef> ParseGraphFile(const std::string& path, const std::string& bytes);

// The server's default --max_parameter_bytes: larger weights would be
// refused when the graph loads.
inline constexpr int64_t kMaxFilledParameterBytes = int64_t{4} << 30;

// Fills every layer whose weights are empty with values drawn from `seed`
// (uniform, scaled by 1/sqrt(fan-in) so activations stay O(1) through deep
// stacks), and, when `with_bias`, every empty bias too. Deterministic for a
// given seed and graph. INVALID_ARGUMENT when the graph's sizes are not set;
// RESOURCE_EXHAUSTED, before allocating, when the graph's weights and biases
// (given or filled) would pass `max_bytes` in all.
absl::Status FillParameters(uint64_t seed, bool with_bias, v1::GraphDef* graph,
                            int64_t max_bytes = kMaxFilledParameterBytes);

// `count` values uniform in [-1, 1) from `seed`, as bytes of `type`.
std::string RandomTensorBytes(v1::DataType type, int64_t count, uint64_t seed);

// Bytes per element of a data type (0 when unspecified).
int ElementSize(v1::DataType type);

// Reads a whole file; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
absl::Status WriteFileBytes(const std::string& path, const std::string& bytes);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_GRAPH_FILE_H_
