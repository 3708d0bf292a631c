// Prometheus metrics and per-graph statistics of a server. Histograms for
// every request stage (microseconds to seconds), request counters by status
// code, and, collected at scrape time from the runner, queue depths, plan
// cache figures, GPU memory and build info. Graph labels are graph names,
// bounded in number (--max_metric_graphs; later names share "_other");
// shapes never become labels. Thread-safe.
#ifndef CONVSERVE_SERVER_SERVER_METRICS_H_
#define CONVSERVE_SERVER_SERVER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "convserve/v1/convserve.pb.h"
#include "engine/runtime/infer_call.h"
#include "engine/runtime/request_runner.h"
#include "server/graph_warmups.h"

namespace convserve {

class InferenceCore;

struct ServerMetricsOptions {
  // host:port of the /metrics endpoint; empty serves none (statistics and
  // Render() still work). Port 0 picks a free port.
  std::string listen_address = "0.0.0.0:8002";
  // Distinct graph label values before names share "_other".
  int max_graph_labels = 32;
};

class ServerMetrics {
 public:
  // `core` (for the runner's stats and the loaded graphs) outlives this.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(
      const ServerMetricsOptions& options, const InferenceCore* core);
  ~ServerMetrics();

  // The port /metrics is served on; 0 when none.
  int port() const { return port_; }

  void RequestStarted() { inflight_->Increment(); }
  // One answered request of `graph` (name; id for statistics) over
  // `protocol` ("convserve" or "kserve").
  void RequestFinished(const std::string& graph, const std::string& graph_id,
                       const std::string& protocol, absl::StatusCode code, double seconds,
                       const InferTimings& timings, int64_t bytes_in, int64_t bytes_out);
  // A request refused before it was accepted (unknown graph, malformed
  // tensor) after `seconds`: counted under graph "_unknown" when its graph is
  // not loaded, else also as a failure in the graph's statistics.
  void RequestRejected(const std::string& graph, const std::string& protocol,
                       absl::StatusCode code, double seconds);
  void PlanBuilt(const PlanBuildEvent& event);
  // One execution of a graph's layers that answered requests OK (a batch,
  // or one request): executions and batch sizes for statistics, and the
  // batch-size histogram of graphs that batch.
  void ExecutionFinished(const ExecutionEvent& event);
  // A graph's warm-up run ended (convserve_graph_warmup_duration_seconds).
  void GraphWarmedUp(const WarmupEvent& event);
  // A graph management call (`rpc`) refused by the policy, and why
  // (server/graph_management_policy.h).
  void GraphManagementRefused(absl::string_view rpc, absl::string_view reason);

  // Cumulative per-graph counts and durations (convserve.v1 GetStatistics);
  // `graph` empty for all, else a name.
  v1::GetStatisticsResponse Statistics(const std::string& graph) const;

  // The text exposition, as /metrics serves it.
  std::string Render() const;

 private:
  class RuntimeCollector;
  ServerMetrics(const ServerMetricsOptions& options, const InferenceCore* core);
  std::string GraphLabel(const std::string& graph);

  const ServerMetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<RuntimeCollector> runtime_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;

  prometheus::Family<prometheus::Histogram>* request_seconds_;
  prometheus::Family<prometheus::Histogram>* queue_seconds_;
  prometheus::Family<prometheus::Histogram>* plan_build_seconds_;
  prometheus::Family<prometheus::Histogram>* h2d_seconds_;
  prometheus::Family<prometheus::Histogram>* compute_seconds_;
  prometheus::Family<prometheus::Histogram>* d2h_seconds_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  prometheus::Family<prometheus::Histogram>* batch_delay_seconds_;
  prometheus::Family<prometheus::Histogram>* warmup_seconds_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* plan_builds_;
  prometheus::Family<prometheus::Counter>* bytes_in_;
  prometheus::Family<prometheus::Counter>* bytes_out_;
  prometheus::Family<prometheus::Counter>* management_refusals_;
  prometheus::Gauge* inflight_;

  // The series a successful request of one graph label, protocol and GPU
  // updates, looked up once: prometheus-cpp's Family::Add builds and hashes
  // a label map on every call. (Series are never removed, so the pointers
  // stay valid.)
  struct OkSeries {
    prometheus::Counter* requests;
    prometheus::Histogram* request_seconds;
    prometheus::Counter* bytes_in;
    prometheus::Counter* bytes_out;
    prometheus::Histogram* queue_seconds;  // null when `device` is empty (never ran)
    prometheus::Histogram* h2d_seconds;
    prometheus::Histogram* compute_seconds;
    prometheus::Histogram* d2h_seconds;
  };
  // `device` as InferTimings has it: empty for a request that never ran on
  // a device (the series then carry gpu="none").
  const OkSeries& SeriesOf(const std::string& label, const std::string& protocol,
                           const std::string& device);

  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> labelled_graphs_ ABSL_GUARDED_BY(mu_);
  absl::Mutex series_mu_;
  // Keyed by label, protocol and device joined with '\n'.
  absl::flat_hash_map<std::string, std::unique_ptr<OkSeries>> series_ ABSL_GUARDED_BY(series_mu_);
  absl::flat_hash_map<std::string, v1::GraphStatistics> statistics_ ABSL_GUARDED_BY(mu_);
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_SERVER_METRICS_H_
