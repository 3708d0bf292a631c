#include "client/load_generator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "client/load_level.h"
#include "client/server_breakdown.h"

namespace convserve {

LatencySummary SummarizeLatencies(std::vector<double> latencies_ms) {
  LatencySummary summary;
  if (latencies_ms.empty()) return summary;
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const size_t n = latencies_ms.size();
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  const auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    return latencies_ms[std::min(n, std::max<size_t>(rank, 1)) - 1];
  };
  summary.count = static_cast<int64_t>(n);
  double sum = 0;
  for (double v : latencies_ms) sum += v;
  summary.mean_ms = sum / static_cast<double>(n);
  summary.min_ms = latencies_ms.front();
  summary.p50_ms = at(0.50);
  summary.p90_ms = at(0.90);
  summary.p95_ms = at(0.95);
  summary.p99_ms = at(0.99);
  summary.p999_ms = at(0.999);
  summary.max_ms = latencies_ms.back();
  return summary;
}

double ErrorRatio(const RequestTotals& totals) {
  return totals.sent > 0 ? static_cast<double>(totals.errors) / static_cast<double>(totals.sent)
                         : 0.0;
}

absl::StatusOr<RunResult> RunLoad(LoadSession& session, const LoadOptions& options) {
  absl::Status valid = ValidateLoadOptions(options);
  if (!valid.ok()) return valid;
  RunResult result;
  const InferInput& input = session.input();
  result.protocol = ProtocolName(session.protocol());
  result.transport = session.transport();
  result.shared_memory = SharedMemoryKindName(session.shared_memory());
  result.streaming = session.streaming();
  result.servers = session.pool().targets();
  result.graph = input.graph;
  result.data_type = v1::DataType_Name(input.definition.data_type());
  result.layout = v1::Layout_Name(input.definition.layout());
  result.input_shape = input.shape;
  result.batch = session.batch();
  result.input_bytes = static_cast<int64_t>(input.bytes.size());
  result.mode = options.mode;
  result.arrival = options.arrival;
  result.measurement = options.measurement;

  const size_t levels = options.mode == LoadMode::kClosedLoop ? options.concurrency.size()
                                                              : options.request_rates.size();
  for (size_t i = 0; i < levels; ++i) {
    const bool closed = options.mode == LoadMode::kClosedLoop;
    LoadLevel level(&session, &options, closed ? options.concurrency[i] : 0,
                    closed ? 0.0 : options.request_rates[i], options.arrival_seed + i);
    const absl::StatusOr<v1::GraphStatistics> before =
        FetchServerStatistics(session.servers(), input.definition.name());
    LevelResult level_result = level.Run();
    const absl::StatusOr<v1::GraphStatistics> after =
        FetchServerStatistics(session.servers(), input.definition.name());
    if (!before.ok()) {
      level_result.server_breakdown = before.status();
    } else if (!after.ok()) {
      level_result.server_breakdown = after.status();
    } else {
      level_result.server_breakdown = BreakdownBetween(*before, *after);
    }
    result.levels.push_back(std::move(level_result));
    result.warmup_requests += level.warmup_requests();
  }
  result.output_bytes = session.output_bytes();
  result.totals = session.totals();
  if (session.verifier() != nullptr) result.verify = session.verifier()->result();
  return result;
}

}  // namespace convserve
