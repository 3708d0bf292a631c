// What a convserve-load run does: closed loop over a concurrency range or
// open loop over request rates, and how it measures (warm-up, windows,
// stability). Plain data; see docs/load-generator.md for the semantics.
#ifndef CONVSERVE_CLIENT_LOAD_OPTIONS_H_
#define CONVSERVE_CLIENT_LOAD_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace convserve {

enum class LoadMode {
  // A fixed number of requests in flight; each completion sends the next.
  kClosedLoop,
  // Requests sent on a schedule whatever the server does; latency counts
  // from the scheduled send time.
  kOpenLoop,
};

enum class Arrival {
  kConstant,  // evenly spaced sends
  kPoisson,   // exponential gaps with the same mean
};

const char* LoadModeName(LoadMode mode);
const char* ArrivalName(Arrival arrival);
absl::StatusOr<Arrival> ParseArrival(const std::string& name);

struct MeasurementOptions {
  // Load before the first window; not measured.
  absl::Duration warmup = absl::Seconds(1);
  // Length of one measurement window.
  absl::Duration window = absl::Seconds(5);
  // When > 0, windows are this many requests instead of `window` long.
  int64_t window_requests = 0;
  // Stable when the last `stable_windows` windows' throughput and p99 are
  // each within this percentage of their mean.
  double stability_percent = 10;
  int stable_windows = 3;
  // Windows per level at most; a level that does not settle is reported
  // from its last `stable_windows` windows and marked unstable.
  int max_windows = 10;
};

struct LoadOptions {
  // Closed or open loop.
  LoadMode mode = LoadMode::kClosedLoop;
  // Closed loop: the levels of requests in flight, in order.
  std::vector<int> concurrency = {1};
  // Closed loop: one thread per request in flight, each making blocking
  // calls (InferRequestSender::SendBlocking), as perf_analyzer does by
  // default; false: gRPC's callback API, each completion sending the next
  // request from a gRPC thread. The open loop always uses the callback API.
  // Callbacks by default: at 64 in flight they did 36% more requests per
  // second than 64 blocking threads (docs/load-generator.md).
  bool blocking_calls = false;
  // Open loop: the levels of requests per second, in order.
  std::vector<double> request_rates;
  // Open loop: spacing of sends.
  Arrival arrival = Arrival::kConstant;
  // Open loop, Poisson: seed of the gaps.
  uint64_t arrival_seed = 1;
  // Warm-up, windows, stability.
  MeasurementOptions measurement;
  // With a verifier: check every n-th response (the first always).
  int verify_every = 10;
  // Receives a one-line status about once a second; null for none.
  std::function<void(const std::string& line)> progress;
};

// "start:end:step" sweeps: "1:64:x2" multiplies (1, 2, 4, ... 64), "1:8:+1"
// or "1:8:1" adds, "1:8" adds 1, and "4" is one level. The end is included
// when the steps land on it. INVALID_ARGUMENT names `flag`.
absl::StatusOr<std::vector<double>> ParseRange(const std::string& text, const std::string& flag);
// The same, every level a positive integer.
absl::StatusOr<std::vector<int>> ParseIntRange(const std::string& text, const std::string& flag);

// Checks the options' invariants (positive levels, windows, percentages).
absl::Status ValidateLoadOptions(const LoadOptions& options);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_OPTIONS_H_
