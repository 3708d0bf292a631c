// What a convserve-load run measured: per level (one concurrency or request
// rate) the throughput, latency percentiles and errors of its measurement
// windows, plus the session's totals. Plain data, filled by RunLoad and
// printed by load_report.h.
#ifndef CONVSERVE_CLIENT_LOAD_RESULT_H_
#define CONVSERVE_CLIENT_LOAD_RESULT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/load_options.h"
#include "client/load_session.h"
#include "client/output_verifier.h"
#include "client/server_breakdown.h"

namespace convserve {

// Latency mean and percentiles in milliseconds (nearest rank); all 0 when
// count is 0.
struct LatencySummary {
  int64_t count = 0;
  double mean_ms = 0;
  double min_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
};

LatencySummary SummarizeLatencies(std::vector<double> latencies_ms);

struct WindowResult {
  // Length of the window.
  double seconds = 0;
  // Requests sent in the window (ok + errors).
  int64_t requests = 0;
  // Successful completions within the window, per second.
  double throughput_rps = 0;
  // Of the successful requests sent in the window.
  double p99_ms = 0;
};

struct LevelResult {
  // The level: requests in flight (closed loop) or offered requests per
  // second (open loop); the other is 0.
  int concurrency = 0;
  double request_rate = 0;
  // Every window measured at this level, in order.
  std::vector<WindowResult> windows;
  // The last `windows_used` windows make up the numbers below.
  int windows_used = 0;
  // Whether those windows agreed within the stability percentage.
  bool stable = false;
  // Requests sent in those windows, and how they ended.
  int64_t requests = 0;
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_code;
  // Successful completions per second; images are requests x batch; MB are
  // 1e6 bytes of input plus output tensor.
  double throughput_rps = 0;
  double images_per_s = 0;
  double mb_per_s = 0;
  // Client-side, from the (scheduled) send to the response.
  LatencySummary latency;
  // Every request of the level (warm-up, windows, and the tail in flight
  // when it stopped), and how many succeeded.
  int64_t level_requests = 0;
  int64_t level_ok = 0;
  // Mean client-side latency of those that succeeded: the same requests the
  // server breakdown covers.
  double level_mean_ms = 0;
  // What the servers did during the whole level (GetStatistics before and
  // after), or why that is not available.
  absl::StatusOr<ServerBreakdown> server_breakdown = absl::UnimplementedError("not fetched");
};

struct RunResult {
  // Echo of the setup, for the report.
  std::string protocol;
  // How requests and tensors travel (InferRequestSender::transport), and
  // its two choices: "none", "system" or "cuda"; unary or streamed.
  std::string transport;
  std::string shared_memory = "none";
  bool streaming = false;
  std::vector<std::string> servers;
  std::string graph;
  std::string data_type;
  std::string layout;
  std::vector<int64_t> input_shape;
  int64_t batch = 1;
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
  LoadMode mode = LoadMode::kClosedLoop;
  Arrival arrival = Arrival::kConstant;
  MeasurementOptions measurement;
  // One per concurrency level or request rate, in order.
  std::vector<LevelResult> levels;
  // Requests sent during warm-up, over every level.
  int64_t warmup_requests = 0;
  // Every inference request of the session (probe, warm-up, windows and
  // the tail after the last window).
  RequestTotals totals;
  // Set when outputs were checked against the CPU reference.
  std::optional<VerifyResult> verify;
};

// Errors over everything sent; 0 when nothing was sent.
double ErrorRatio(const RequestTotals& totals);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_LOAD_RESULT_H_
