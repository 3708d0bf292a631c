// Sends mixed inference traffic from many client threads and checks every
// answer: each request either returns the expected output (within a
// relative L2 bound) or a status; nothing hangs, nothing is partial.
#ifndef CONVSERVE_TESTS_TEST_UTIL_TRAFFIC_H_
#define CONVSERVE_TESTS_TEST_UTIL_TRAFFIC_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "convserve/v1/convserve.pb.h"
#include "engine/tensor.h"

namespace convserve {

struct TrafficRequest {
  // What to send.
  v1::InferRequest request;
  // The CPU reference's output bytes for it.
  std::string expected;
  DType dtype = DType::kFloat32;
  // Largest relative L2 error accepted.
  double bound = 1e-5;
};

struct TrafficResult {
  int64_t sent = 0;
  int64_t correct = 0;
  // OK answers whose output was wrong or of the wrong size (must stay 0).
  int64_t wrong = 0;
  // Error answers by gRPC status code name.
  std::map<std::string, int64_t> errors;
  // The first message seen for each code.
  std::map<std::string, std::string> messages;
  double max_error = 0;
};

// `threads` threads each send `per_thread` requests, cycling through
// `requests` (thread t starts at request t). `after_each` runs after every
// answer with the number answered so far (e.g. to unload or stop midway).
TrafficResult SendTraffic(const std::string& address, const std::vector<TrafficRequest>& requests,
                          int threads, int per_thread,
                          const std::function<void(int64_t answered)>& after_each = nullptr);

// Builds a request for `graph` with a random input of `shape` from `seed`,
// and its expected output from an in-process CPU backend.
TrafficRequest MakeTrafficRequest(const v1::GraphDef& graph, const std::vector<int64_t>& shape,
                                  uint64_t seed, double bound);

}  // namespace convserve

#endif  // CONVSERVE_TESTS_TEST_UTIL_TRAFFIC_H_
