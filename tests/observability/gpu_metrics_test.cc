// The GPU backend's per-GPU metrics without a GPU: a runner that reports
// statistics as the device pool does (two GPUs, one of them faulted) behind
// a real server, and /metrics gives each figure under its GPU's labels.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/observability/observed_traffic.h"
#include "tests/test_util/immediate_runner.h"
#include "tests/test_util/test_server.h"

namespace convserve {
namespace {

// Answers as ImmediateRunner does and reports the statistics it was given.
class ReportingRunner : public ImmediateRunner {
 public:
  explicit ReportingRunner(RunnerStats stats) : stats_(std::move(stats)) {}
  RunnerStats Stats() const override { return stats_; }

 private:
  const RunnerStats stats_;
};

DeviceStats Gpu(const std::string& ordinal, const std::string& uuid) {
  DeviceStats gpu;
  gpu.device = ordinal;
  gpu.uuid = uuid;
  gpu.name = "Test GPU";
  gpu.memory_total_bytes = int64_t{80} << 30;
  return gpu;
}

TEST(GpuMetricsTest, EachGpusFiguresCarryItsOrdinalAndUuid) {
  RunnerStats stats;
  DeviceStats serving = Gpu("0", "GPU-0000aaaa");
  serving.queued = 3;
  serving.launched_ahead = 12345;
  serving.memory_used_bytes = int64_t{5} << 30;
  DeviceStats faulted = Gpu("1", "GPU-1111bbbb");
  faulted.faults = 1;
  faulted.healthy = false;
  faulted.launched_ahead = 7;
  stats.devices = {serving, faulted};
  std::unique_ptr<TestServer> server =
      TestServer::Start({}, std::make_unique<ReportingRunner>(stats), /*serve_metrics=*/true);

  absl::StatusOr<std::string> page = FetchMetrics(server->server()->metrics().port());
  ASSERT_TRUE(page.ok()) << page.status();
  for (const char* line : {
           "\nconvserve_gpu_launched_ahead_total{gpu=\"0\",uuid=\"GPU-0000aaaa\"} 12345\n",
           "\nconvserve_gpu_launched_ahead_total{gpu=\"1\",uuid=\"GPU-1111bbbb\"} 7\n",
           "\nconvserve_gpu_faults_total{gpu=\"0\",uuid=\"GPU-0000aaaa\"} 0\n",
           "\nconvserve_gpu_faults_total{gpu=\"1\",uuid=\"GPU-1111bbbb\"} 1\n",
           "\nconvserve_gpu_healthy{gpu=\"0\",uuid=\"GPU-0000aaaa\"} 1\n",
           "\nconvserve_gpu_healthy{gpu=\"1\",uuid=\"GPU-1111bbbb\"} 0\n",
           "\nconvserve_queue_depth{gpu=\"0\"} 3\n",
           "\nconvserve_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0000aaaa\"} 5368709120\n",
       }) {
    EXPECT_TRUE(absl::StrContains(*page, line)) << "missing:" << line << *page;
  }
}

}  // namespace
}  // namespace convserve
