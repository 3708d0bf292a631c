#include "server/kserve_statistics.h"

#include <cmath>
#include <cstdint>

namespace convserve {
namespace {

uint64_t Nanoseconds(double seconds) {
  return seconds > 0 ? static_cast<uint64_t>(std::llround(seconds * 1e9)) : 0;
}

void SetDuration(int64_t count, double seconds, inference::StatisticDuration* duration) {
  duration->set_count(static_cast<uint64_t>(count));
  duration->set_ns(Nanoseconds(seconds));
}

void SetStage(const v1::StageStatistics& stage, inference::StatisticDuration* duration) {
  SetDuration(stage.count(), stage.total_seconds(), duration);
}

}  // namespace

void KServeStatisticsToProto(const std::string& name, const v1::GraphStatistics& figures,
                             inference::ModelStatistics* statistics) {
  statistics->set_name(name);
  statistics->set_version("1");
  statistics->set_last_inference(static_cast<uint64_t>(figures.last_request_unix_ms()));
  statistics->set_inference_count(static_cast<uint64_t>(figures.inference_count()));
  statistics->set_execution_count(static_cast<uint64_t>(figures.execution_count()));
  inference::InferStatistics* stats = statistics->mutable_inference_stats();
  SetDuration(figures.success_count(), figures.request().total_seconds(), stats->mutable_success());
  SetStage(figures.failure(), stats->mutable_fail());
  SetStage(figures.queue(), stats->mutable_queue());
  SetStage(figures.h2d(), stats->mutable_compute_input());
  SetDuration(figures.compute().count(),
              figures.plan().total_seconds() + figures.compute().total_seconds(),
              stats->mutable_compute_infer());
  SetStage(figures.d2h(), stats->mutable_compute_output());
  for (const v1::BatchStatistics& figure : figures.batch_stats()) {
    inference::InferBatchStatistics* batch = statistics->add_batch_stats();
    batch->set_batch_size(static_cast<uint64_t>(figure.batch_size()));
    SetStage(figure.h2d(), batch->mutable_compute_input());
    SetDuration(figure.count(), figure.plan().total_seconds() + figure.compute().total_seconds(),
                batch->mutable_compute_infer());
    SetStage(figure.d2h(), batch->mutable_compute_output());
  }
}

}  // namespace convserve
