#include "server/server_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/inference_core.h"
#include "server/version.h"

namespace convserve {
namespace {

// 5 us to 30 s in 1-2-5 steps: GPU kernels to cold autotune builds.
const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2,
      2e-2, 5e-2, 0.1,  0.2,  0.5,  1,    2,    5,    10,   30};
  return *buckets;
}

prometheus::ClientMetric Value(std::vector<prometheus::ClientMetric::Label> labels, double value,
                               bool counter) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  (counter ? metric.counter.value : metric.gauge.value) = value;
  return metric;
}

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type,
                                std::vector<prometheus::ClientMetric> metrics) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  family.metric = std::move(metrics);
  return family;
}

void AddStage(v1::StageStatistics* stage, double seconds) {
  stage->set_count(stage->count() + 1);
  stage->set_total_seconds(stage->total_seconds() + seconds);
}

// A graph's warm-up: one CPU compile (ms) to autotuned searches of many
// layers and shapes on several GPUs (minutes).
const prometheus::Histogram::BucketBoundaries& WarmupBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      1e-3, 1e-2, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};
  return *buckets;
}

// Batch sizes (the N of one execution) in powers of two.
const prometheus::Histogram::BucketBoundaries& BatchSizeBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return *buckets;
}

// The entry of `batch_size` in `statistics`, kept in ascending order.
v1::BatchStatistics* BatchEntry(v1::GraphStatistics* statistics, int64_t batch_size) {
  auto* entries = statistics->mutable_batch_stats();
  for (v1::BatchStatistics& entry : *entries) {
    if (entry.batch_size() == batch_size) return &entry;
  }
  v1::BatchStatistics* added = entries->Add();
  added->set_batch_size(batch_size);
  std::sort(entries->begin(), entries->end(),
            [](const v1::BatchStatistics& a, const v1::BatchStatistics& b) {
              return a.batch_size() < b.batch_size();
            });
  for (v1::BatchStatistics& entry : *entries) {
    if (entry.batch_size() == batch_size) return &entry;
  }
  return added;
}

}  // namespace

// Figures owned by the runner and the core, read at scrape time.
class ServerMetrics::RuntimeCollector : public prometheus::Collectable {
 public:
  explicit RuntimeCollector(const InferenceCore* core) : core_(core) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    const RunnerStats stats = core_->runner().Stats();
    std::vector<prometheus::ClientMetric> queue, memory_used, memory_total, faults, healthy,
        launched_ahead;
    for (const DeviceStats& d : stats.devices) {
      queue.push_back(Value({{"gpu", d.device}}, static_cast<double>(d.queued), false));
      if (!d.uuid.empty()) {
        faults.push_back(Value({{"gpu", d.device}, {"uuid", d.uuid}},
                               static_cast<double>(d.faults), true));
        healthy.push_back(Value({{"gpu", d.device}, {"uuid", d.uuid}}, d.healthy ? 1 : 0, false));
        launched_ahead.push_back(Value({{"gpu", d.device}, {"uuid", d.uuid}},
                                       static_cast<double>(d.launched_ahead), true));
      }
      if (d.memory_total_bytes > 0) {
        memory_used.push_back(Value({{"gpu", d.device}, {"uuid", d.uuid}},
                                    static_cast<double>(d.memory_used_bytes), false));
        memory_total.push_back(Value({{"gpu", d.device}, {"uuid", d.uuid}},
                                     static_cast<double>(d.memory_total_bytes), false));
      }
    }
    std::vector<prometheus::ClientMetric::Label> build = {{"version", kConvServeVersion}};
    for (const auto& [name, version] : stats.versions) build.push_back({name, version});
    std::vector<prometheus::MetricFamily> families = {
        Family("convserve_queue_depth", "Requests waiting for a worker, per GPU (or cpu).",
               MetricType::Gauge, queue),
        // A lookup that waited for another request's build of its key
        // (single-flight) built nothing either: it counts as a hit, so hits +
        // misses are all lookups however concurrent the first requests are.
        Family("convserve_plan_cache_hits_total",
               "Plan lookups that built nothing: answered from the cache or by a build in "
               "progress.",
               MetricType::Counter,
               {Value({}, static_cast<double>(stats.plans.hits + stats.plans.waits), true)}),
        Family("convserve_plan_cache_misses_total", "Plan lookups that started a build.",
               MetricType::Counter, {Value({}, stats.plans.misses, true)}),
        Family("convserve_plan_cache_evictions_total", "Plans evicted to stay within bounds.",
               MetricType::Counter, {Value({}, stats.plans.evictions, true)}),
        Family("convserve_cached_plans", "Plans in the cache.", MetricType::Gauge,
               {Value({}, stats.plans.entries, false)}),
        Family("convserve_cached_plan_bytes",
               "Bytes the cached plans account for (workspaces and descriptors).",
               MetricType::Gauge, {Value({}, stats.plans.bytes, false)}),
        Family("convserve_loaded_graphs", "Graphs loaded.", MetricType::Gauge,
               {Value({}, static_cast<double>(core_->ListGraphs().size()), false)}),
        Family("convserve_warming_graphs",
               "Graphs loaded and still warming up (KServe ModelReady false).", MetricType::Gauge,
               {Value({}, static_cast<double>(core_->warming_graphs()), false)}),
        Family("convserve_build_info", "Versions of the server and its libraries.",
               MetricType::Gauge, {Value(build, 1, false)}),
    };
    if (!memory_total.empty()) {
      families.push_back(Family("convserve_gpu_memory_used_bytes", "GPU memory in use.",
                                MetricType::Gauge, memory_used));
      families.push_back(Family("convserve_gpu_memory_total_bytes", "GPU memory in all.",
                                MetricType::Gauge, memory_total));
    }
    if (!faults.empty()) {
      const EngineSearchStats& e = stats.engine_search;
      families.push_back(Family(
          "convserve_gpu_faults_total",
          "Sticky CUDA errors (lost GPU contexts) while serving; a faulted GPU serves no more.",
          MetricType::Counter, faults));
      families.push_back(Family("convserve_gpu_healthy",
                                "1 while the GPU serves, 0 after it lost its CUDA context.",
                                MetricType::Gauge, healthy));
      families.push_back(Family(
          "convserve_gpu_launched_ahead_total",
          "Requests a GPU worker launched before it had seen its previous request finish "
          "(--launch_ahead).",
          MetricType::Counter, launched_ahead));
      families.push_back(Family("convserve_engine_searches_total",
                                "cuDNN engine searches (one per new layer problem and GPU model).",
                                MetricType::Counter, {Value({}, e.searches, true)}));
      families.push_back(Family(
          "convserve_engine_choices_from_store_total",
          "Layer engine choices read from the plan store (--plan_cache_dir) instead of searched.",
          MetricType::Counter, {Value({}, e.stored_choices, true)}));
      families.push_back(Family("convserve_engine_prober_starts_total",
                                "Engine prober processes started (again after each fault).",
                                MetricType::Counter, {Value({}, e.prober_starts, true)}));
      families.push_back(Family(
          "convserve_engine_candidates_quarantined_total",
          "Engine candidates quarantined because they faulted, crashed or hung a search.",
          MetricType::Counter, {Value({}, e.quarantined, true)}));
      families.push_back(Family(
          "convserve_engine_candidates_vetoed_total",
          "Engine candidates not run because an earlier verdict quarantined them.",
          MetricType::Counter, {Value({}, e.vetoed, true)}));
      families.push_back(Family(
          "convserve_pointwise_pair_races_total",
          "Pairs of consecutive 1x1 layers raced as one kernel of ours against their two plans "
          "(--fuse_pointwise_pairs; one race per pair of layer problems and GPU model).",
          MetricType::Counter, {Value({}, e.pair_races, true)}));
      families.push_back(Family(
          "convserve_pointwise_pairs_fused_total",
          "Pointwise pair races the fused kernel won: those pairs run as one kernel.",
          MetricType::Counter, {Value({}, e.pairs_fused, true)}));
      const CudaGraphStats& g = stats.cuda_graphs;
      families.push_back(Family(
          "convserve_cuda_graph_captures_total",
          "Requests whose layer launches were captured into CUDA graphs (new or updated in "
          "place), on the second run of a graph, input shape and pointers on a worker.",
          MetricType::Counter, {Value({}, g.captures, true)}));
      families.push_back(Family(
          "convserve_cuda_graph_replays_total",
          "Requests whose layers ran as CUDA graphs an earlier request captured.",
          MetricType::Counter, {Value({}, g.replays, true)}));
      families.push_back(Family(
          "convserve_cuda_graph_capture_fallbacks_total",
          "CUDA graph captures (or launches) that failed; the request ran plain launches and its "
          "graph and shape are not captured again on that worker.",
          MetricType::Counter, {Value({}, g.fallbacks, true)}));
      families.push_back(Family(
          "convserve_cuda_graph_invalidations_total",
          "Captured CUDA graphs dropped because what they captured changed (unload, reload, plan "
          "eviction or rebuild, worker buffer growth).",
          MetricType::Counter, {Value({}, g.invalidations, true)}));
      families.push_back(Family(
          "convserve_cuda_graph_variant_waits_total",
          "Requests run as plain launches because every pointer variant of their graph and "
          "shape had run within the last second (a client cycling over more CUDA regions than "
          "a worker keeps captured).",
          MetricType::Counter, {Value({}, g.variant_waits, true)}));
      families.push_back(Family("convserve_cached_cuda_graphs",
                                "Captured requests held by the workers.", MetricType::Gauge,
                                {Value({}, g.entries, false)}));
    }
    return families;
  }

 private:
  const InferenceCore* const core_;  // outlives the collector (see Create)
};

ServerMetrics::ServerMetrics(const ServerMetricsOptions& options, const InferenceCore* core)
    : options_(options),
      registry_(std::make_shared<prometheus::Registry>()),
      runtime_(std::make_shared<RuntimeCollector>(core)) {
  const auto histogram = [&](const char* name, const char* help) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
  };
  request_seconds_ = histogram("convserve_request_duration_seconds",
                               "Server-side time from accepting a request to answering it.");
  queue_seconds_ = histogram("convserve_queue_duration_seconds",
                             "Time a request waited for a worker.");
  plan_build_seconds_ =
      histogram("convserve_plan_build_duration_seconds", "Time to build one layer's plan.");
  h2d_seconds_ = histogram("convserve_h2d_duration_seconds",
                           "Host-to-device copy of the input, staging included.");
  compute_seconds_ =
      histogram("convserve_compute_duration_seconds", "All layers of one request.");
  d2h_seconds_ = histogram("convserve_d2h_duration_seconds",
                           "Device-to-host copy of the output, staging included.");
  // Its buckets are batch sizes (BatchSizeBuckets), given where it is observed.
  batch_size_ = histogram("convserve_batch_size",
                          "N of each execution the dynamic batcher formed (the sum of its "
                          "requests' N), per graph that batches.");
  batch_delay_seconds_ =
      histogram("convserve_batch_queue_delay_seconds",
                "Time a request waited in the dynamic batcher before its batch was formed.");
  requests_ = &prometheus::BuildCounter()
                   .Name("convserve_requests_total")
                   .Help("Inference requests answered, by gRPC status code.")
                   .Register(*registry_);
  plan_builds_ = &prometheus::BuildCounter()
                      .Name("convserve_plan_builds_total")
                      .Help("Plan builds by result and path.")
                      .Register(*registry_);
  bytes_in_ = &prometheus::BuildCounter()
                   .Name("convserve_request_bytes_total")
                   .Help("Input tensor bytes received.")
                   .Register(*registry_);
  bytes_out_ = &prometheus::BuildCounter()
                    .Name("convserve_response_bytes_total")
                    .Help("Output tensor bytes sent.")
                    .Register(*registry_);
  management_refusals_ =
      &prometheus::BuildCounter()
           .Name("convserve_graph_management_refusals_total")
           .Help("LoadGraph, UnloadGraph, RepositoryModelLoad and RepositoryModelUnload calls "
                 "refused by --graph_management, by call and reason (disabled, missing_token, "
                 "wrong_token).")
           .Register(*registry_);
  // Every series exists from the start at 0, so the first refusal is an
  // increase (rate() and alerts see it) and the family is always on /metrics.
  for (const char* rpc : {"LoadGraph", "UnloadGraph", "RepositoryModelLoad",
                          "RepositoryModelUnload"}) {
    for (const char* reason : {"disabled", "missing_token", "wrong_token"}) {
      management_refusals_->Add({{"rpc", rpc}, {"reason", reason}});
    }
  }
  warmup_seconds_ = histogram("convserve_graph_warmup_duration_seconds",
                              "Time a graph's warm-up at load took (plans for its warm-up shapes "
                              "on every device), by result.");
  // Both series from the start, so the family is always on /metrics.
  for (const char* result : {"ok", "error"}) {
    warmup_seconds_->Add({{"result", result}}, WarmupBuckets());
  }
  inflight_ = &prometheus::BuildGauge()
                   .Name("convserve_inflight_requests")
                   .Help("Inference requests accepted and not yet answered.")
                   .Register(*registry_)
                   .Add({});
}

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    const ServerMetricsOptions& options, const InferenceCore* core) {
  if (options.max_graph_labels < 1) {
    return absl::InvalidArgumentError("--max_metric_graphs must be >= 1");
  }
  std::unique_ptr<ServerMetrics> metrics(new ServerMetrics(options, core));
  if (!options.listen_address.empty()) {
    try {
      metrics->exposer_ = std::make_unique<prometheus::Exposer>(options.listen_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on '",
                                                 options.listen_address,
                                                 "' (--metrics_listen): ", e.what()));
    }
    metrics->exposer_->RegisterCollectable(metrics->registry_);
    metrics->exposer_->RegisterCollectable(metrics->runtime_);
    const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
    metrics->port_ = ports.empty() ? 0 : ports[0];
  }
  return metrics;
}

ServerMetrics::~ServerMetrics() = default;

std::string ServerMetrics::GraphLabel(const std::string& graph) {
  absl::MutexLock lock(&mu_);
  if (labelled_graphs_.contains(graph)) return graph;
  if (static_cast<int>(labelled_graphs_.size()) < options_.max_graph_labels) {
    labelled_graphs_.insert(graph);
    return graph;
  }
  return "_other";
}

void ServerMetrics::GraphManagementRefused(absl::string_view rpc, absl::string_view reason) {
  management_refusals_->Add({{"rpc", std::string(rpc)}, {"reason", std::string(reason)}})
      .Increment();
}

void ServerMetrics::RequestFinished(const std::string& graph, const std::string& graph_id,
                                    const std::string& protocol, absl::StatusCode code,
                                    double seconds, const InferTimings& t, int64_t bytes_in,
                                    int64_t bytes_out) {
  inflight_->Decrement();
  const std::string label = GraphLabel(graph);
  if (code == absl::StatusCode::kOk) {
    const OkSeries& series = SeriesOf(label, protocol, t.device);
    series.requests->Increment();
    series.request_seconds->Observe(seconds);
    series.bytes_in->Increment(static_cast<double>(bytes_in));
    if (series.queue_seconds != nullptr) series.queue_seconds->Observe(t.queue);
    series.bytes_out->Increment(static_cast<double>(bytes_out));
    series.h2d_seconds->Observe(t.h2d);
    series.compute_seconds->Observe(t.compute);
    series.d2h_seconds->Observe(t.d2h);
  } else {
    requests_
        ->Add({{"graph", label}, {"protocol", protocol}, {"code", absl::StatusCodeToString(code)}})
        .Increment();
    request_seconds_->Add({{"graph", label}, {"protocol", protocol}}, Buckets()).Observe(seconds);
    bytes_in_->Add({{"graph", label}}).Increment(static_cast<double>(bytes_in));
    if (!t.device.empty()) {
      queue_seconds_->Add({{"graph", label}, {"gpu", t.device}}, Buckets()).Observe(t.queue);
    }
  }
  if (t.batch_size > 0) {
    batch_delay_seconds_->Add({{"graph", label}}, Buckets()).Observe(t.batch_delay);
  }
  absl::MutexLock lock(&mu_);
  v1::GraphStatistics& s = statistics_[graph];
  s.set_name(graph);
  s.set_id(graph_id);
  if (code == absl::StatusCode::kOk) {
    s.set_success_count(s.success_count() + 1);
    AddStage(s.mutable_request(), seconds);
    AddStage(s.mutable_queue(), t.queue);
    AddStage(s.mutable_plan(), t.build);
    AddStage(s.mutable_h2d(), t.h2d);
    AddStage(s.mutable_compute(), t.compute);
    AddStage(s.mutable_d2h(), t.d2h);
    if (t.batch_size > 0) AddStage(s.mutable_batch_delay(), t.batch_delay);
    s.set_bytes_out(s.bytes_out() + bytes_out);
  } else {
    s.set_failure_count(s.failure_count() + 1);
    AddStage(s.mutable_failure(), seconds);
  }
  s.set_bytes_in(s.bytes_in() + bytes_in);
  s.set_last_request_unix_ms(absl::ToUnixMillis(absl::Now()));
}

const ServerMetrics::OkSeries& ServerMetrics::SeriesOf(const std::string& label,
                                                       const std::string& protocol,
                                                       const std::string& device) {
  const std::string key = absl::StrCat(label, "\n", protocol, "\n", device);
  absl::MutexLock lock(&series_mu_);
  std::unique_ptr<OkSeries>& series = series_[key];
  if (series == nullptr) {
    const prometheus::Labels graph = {{"graph", label}};
    const prometheus::Labels on_gpu = {{"graph", label}, {"gpu", device.empty() ? "none" : device}};
    const std::string ok = absl::StatusCodeToString(absl::StatusCode::kOk);
    series = std::make_unique<OkSeries>(OkSeries{
        &requests_->Add({{"graph", label}, {"protocol", protocol}, {"code", ok}}),
        &request_seconds_->Add({{"graph", label}, {"protocol", protocol}}, Buckets()),
        &bytes_in_->Add(graph),
        &bytes_out_->Add(graph),
        device.empty() ? nullptr : &queue_seconds_->Add(on_gpu, Buckets()),
        &h2d_seconds_->Add(on_gpu, Buckets()),
        &compute_seconds_->Add(on_gpu, Buckets()),
        &d2h_seconds_->Add(on_gpu, Buckets()),
    });
  }
  return *series;
}

void ServerMetrics::RequestRejected(const std::string& graph, const std::string& protocol,
                                    absl::StatusCode code, double seconds) {
  requests_->Add({{"graph", graph.empty() ? "_unknown" : GraphLabel(graph)},
                  {"protocol", protocol},
                  {"code", absl::StatusCodeToString(code)}})
      .Increment();
  if (graph.empty()) return;
  absl::MutexLock lock(&mu_);
  v1::GraphStatistics& s = statistics_[graph];
  s.set_name(graph);
  s.set_failure_count(s.failure_count() + 1);
  AddStage(s.mutable_failure(), seconds);
  s.set_last_request_unix_ms(absl::ToUnixMillis(absl::Now()));
}

void ServerMetrics::PlanBuilt(const PlanBuildEvent& event) {
  const prometheus::Labels labels = {
      {"gpu", event.device}, {"path", event.path}, {"result", event.ok ? "ok" : "error"}};
  plan_builds_->Add(labels).Increment();
  plan_build_seconds_->Add(labels, Buckets()).Observe(event.seconds);
}

void ServerMetrics::GraphWarmedUp(const WarmupEvent& event) {
  warmup_seconds_->Add({{"result", event.ok ? "ok" : "error"}}, WarmupBuckets())
      .Observe(event.seconds);
}

void ServerMetrics::ExecutionFinished(const ExecutionEvent& event) {
  if (event.succeeded == 0) return;
  if (event.batched) {
    batch_size_->Add({{"graph", GraphLabel(event.graph_name)}}, BatchSizeBuckets())
        .Observe(static_cast<double>(event.batch_size));
  }
  absl::MutexLock lock(&mu_);
  v1::GraphStatistics& s = statistics_[event.graph_name];
  s.set_name(event.graph_name);
  s.set_id(event.graph_id);
  s.set_execution_count(s.execution_count() + 1);
  // As Triton counts: a graph without batching runs batches of 1, however
  // large a request's N.
  s.set_inference_count(s.inference_count() +
                        (event.batched ? event.succeeded_batch : event.succeeded));
  v1::BatchStatistics* batch = BatchEntry(&s, event.batched ? event.batch_size : 1);
  batch->set_count(batch->count() + 1);
  AddStage(batch->mutable_plan(), event.timings.build);
  AddStage(batch->mutable_h2d(), event.timings.h2d);
  AddStage(batch->mutable_compute(), event.timings.compute);
  AddStage(batch->mutable_d2h(), event.timings.d2h);
}

v1::GetStatisticsResponse ServerMetrics::Statistics(const std::string& graph) const {
  v1::GetStatisticsResponse response;
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, stats] : statistics_) {
    if (graph.empty() || name == graph) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) *response.add_graphs() = statistics_.at(name);
  return response;
}

std::string ServerMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : runtime_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace convserve
