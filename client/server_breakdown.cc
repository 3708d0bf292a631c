#include "client/server_breakdown.h"

#include <utility>

namespace convserve {
namespace {

void AddStage(const v1::StageStatistics& from, v1::StageStatistics* to) {
  to->set_count(to->count() + from.count());
  to->set_total_seconds(to->total_seconds() + from.total_seconds());
}

ServerStage Between(const char* name, const v1::StageStatistics& before,
                    const v1::StageStatistics& after) {
  ServerStage stage;
  stage.name = name;
  stage.count = after.count() - before.count();
  const double seconds = after.total_seconds() - before.total_seconds();
  stage.mean_ms = stage.count > 0 ? seconds * 1e3 / static_cast<double>(stage.count) : 0;
  return stage;
}

}  // namespace

absl::StatusOr<v1::GraphStatistics> FetchServerStatistics(
    const std::vector<ConvServeClient*>& servers, const std::string& graph) {
  v1::GraphStatistics sum;
  for (ConvServeClient* server : servers) {
    absl::StatusOr<v1::GetStatisticsResponse> response = server->GetStatistics(graph);
    if (!response.ok()) return response.status();
    for (const v1::GraphStatistics& s : response->graphs()) {
      sum.set_success_count(sum.success_count() + s.success_count());
      sum.set_failure_count(sum.failure_count() + s.failure_count());
      AddStage(s.request(), sum.mutable_request());
      AddStage(s.queue(), sum.mutable_queue());
      AddStage(s.plan(), sum.mutable_plan());
      AddStage(s.h2d(), sum.mutable_h2d());
      AddStage(s.compute(), sum.mutable_compute());
      AddStage(s.d2h(), sum.mutable_d2h());
      sum.set_bytes_in(sum.bytes_in() + s.bytes_in());
      sum.set_bytes_out(sum.bytes_out() + s.bytes_out());
    }
  }
  return sum;
}

ServerBreakdown BreakdownBetween(const v1::GraphStatistics& before,
                                 const v1::GraphStatistics& after) {
  ServerBreakdown breakdown;
  breakdown.success = after.success_count() - before.success_count();
  breakdown.failure = after.failure_count() - before.failure_count();
  breakdown.stages = {Between("request", before.request(), after.request()),
                      Between("queue", before.queue(), after.queue()),
                      Between("plan", before.plan(), after.plan()),
                      Between("h2d", before.h2d(), after.h2d()),
                      Between("compute", before.compute(), after.compute()),
                      Between("d2h", before.d2h(), after.d2h())};
  return breakdown;
}

}  // namespace convserve
