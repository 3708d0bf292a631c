// The traffic the observability tests send and what they read back: one
// small graph, three input shapes (three plan-cache keys), requests that
// succeed over both protocols and requests that fail in known ways, and the
// server's /metrics page fetched over HTTP as Prometheus fetches it.
#ifndef CONVSERVE_TESTS_OBSERVABILITY_OBSERVED_TRAFFIC_H_
#define CONVSERVE_TESTS_OBSERVABILITY_OBSERVED_TRAFFIC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"
#include "tests/test_util/traffic.h"

namespace convserve {

// Two conv layers (relu, swish), float32 NCHW, 3 input channels.
v1::GraphDef ObservedGraph(const std::string& name);

// One request per input shape, with expected outputs; each shape is its own
// plan-cache key.
std::vector<TrafficRequest> ObservedRequests(const v1::GraphDef& graph);

// Failing requests sent on purpose, by the status code they must get.
struct FailingRequests {
  // Inference on a graph name that is not loaded: NOT_FOUND.
  int unknown_graph = 0;
  // Input with 4 channels for a 3-channel graph: INVALID_ARGUMENT.
  int wrong_channels = 0;
};

// Sends them over convserve.v1 and returns the codes they got, by name.
std::map<std::string, int64_t> SendFailingRequests(const std::string& address,
                                                   const std::string& graph,
                                                   const FailingRequests& failing);

// `count` KServe ModelInfer calls with the first shape; OK or the first error.
absl::Status SendKServeRequests(const std::string& address, const v1::GraphDef& graph, int count);

// GET http://127.0.0.1:`port`/metrics; an error unless HTTP 200.
absl::StatusOr<std::string> FetchMetrics(int port);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_OBSERVABILITY_OBSERVED_TRAFFIC_H_
