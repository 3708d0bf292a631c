// The GPU runtime end to end through gRPC on one host:
//  1. cold plan build time per layer, heuristic and autotune (first request of
//     a shape), and the warm per-request build/lookup time;
//  2. latency breakdown of a small and a large request: queue, plan lookup,
//     H2D, compute, D2H as the server measures them, and the rest of the
//     client-observed time (gRPC, serialization, scheduling);
//  3. throughput at client concurrency 1, 8 and 64.
// Prints tables; run by scripts/gpu_check.sh (STEPS=runtime).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "engine/runtime/device_pool.h"
#include "tests/test_util/test_server.h"

ABSL_FLAG(std::string, graph_file, "deploy/examples/resnet_block.textproto", "graph to serve");
ABSL_FLAG(double, seconds, 4, "seconds per throughput level");

namespace convserve {
namespace {

// The benchmark stops at the first failed call: figures over failed requests
// would be wrong, not slow.
void Must(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "runtime_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}
template <typename T>
void Must(const absl::StatusOr<T>& result, const char* what) {
  Must(result.status(), what);
}

// Forwards to the real runner and keeps every request's server-side timings.
class RecordingRunner : public RequestRunner {
 public:
  explicit RecordingRunner(std::unique_ptr<RequestRunner> inner) : inner_(std::move(inner)) {}
  absl::Status AddGraph(const std::shared_ptr<const Graph>& g) override {
    return inner_->AddGraph(g);
  }
  void RemoveGraph(const std::string& id) override { inner_->RemoveGraph(id); }
  absl::Status Warm(const std::shared_ptr<const Graph>& g, const Shape& shape,
                    const CancelCheck& cancelled) override {
    return inner_->Warm(g, shape, cancelled);
  }
  void Drain() override { inner_->Drain(); }
  std::string Describe() const override { return inner_->Describe(); }
  RunnerStats Stats() const override { return inner_->Stats(); }
  void Submit(InferCall call) override {
    call.done = [this, done = std::move(call.done)](const absl::Status& s, const Shape& shape,
                                                    const InferTimings& t) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        timings_.push_back(t);
      }
      done(s, shape, t);
    };
    inner_->Submit(std::move(call));
  }
  void SubmitBatch(InferBatch batch) override {
    for (InferCall& call : batch.calls) {
      call.done = [this, done = std::move(call.done)](const absl::Status& s, const Shape& shape,
                                                      const InferTimings& t) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          timings_.push_back(t);
        }
        done(s, shape, t);
      };
    }
    inner_->SubmitBatch(std::move(batch));
  }
  int concurrency() const override { return inner_->concurrency(); }
  std::vector<InferTimings> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(timings_, {});
  }

 private:
  std::unique_ptr<RequestRunner> inner_;
  std::mutex mu_;
  std::vector<InferTimings> timings_;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

struct Served {
  RecordingRunner* runner;
  std::unique_ptr<TestServer> server;
};

Served Serve(EngineSearch search, int workers, std::vector<int> devices) {
  DevicePoolOptions options;
  options.selection.search = search;
  options.workers_per_device = workers;
  options.devices = std::move(devices);
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(options);
  if (!pool.ok()) {
    std::fprintf(stderr, "%s\n", pool.status().ToString().c_str());
    std::exit(2);
  }
  auto recording = std::make_unique<RecordingRunner>(*std::move(pool));
  RecordingRunner* raw = recording.get();
  return {raw, TestServer::Start({}, std::move(recording))};
}

v1::InferRequest Request(const v1::GraphDef& graph, std::vector<int64_t> shape) {
  v1::InferRequest request;
  request.set_graph(graph.name());
  int64_t count = 1;
  for (int64_t d : shape) {
    request.mutable_input()->add_shape(d);
    count *= d;
  }
  request.mutable_input()->set_data(RandomTensorBytes(graph.data_type(), count, 3));
  return request;
}

struct Throughput {
  double requests_per_second = 0;
  double p50_ms = 0;
};

// `concurrency` client threads send `request` back to back for --seconds.
Throughput Measure(const ClientOptions& options, const v1::InferRequest& request,
                   int concurrency) {
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::vector<double> latencies;
  const auto start = std::chrono::steady_clock::now();
  const auto stop = start + std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds));
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      ConvServeClient client(options);
      std::vector<double> local;
      while (std::chrono::steady_clock::now() < stop) {
        const auto begin = std::chrono::steady_clock::now();
        if (client.Infer(request).ok()) ++done;
        local.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies.insert(latencies.end(), local.begin(), local.end());
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {done / elapsed, Median(latencies) * 1e3};
}

int Run() {
  absl::StatusOr<v1::GraphDef> graph = ReadGraphFile(absl::GetFlag(FLAGS_graph_file));
  if (!graph.ok()) return 2;
  graph->set_data_type(v1::FLOAT16);
  graph->set_layout(v1::NHWC);
  Must(FillParameters(1, true, &*graph), "filling the weights");
  const int layers = graph->layers_size();

  std::printf("== cold plan build per layer (first request of a shape, 1 worker, GPU 0), %s "
              "float16 NHWC, %d layers\n",
              graph->name().c_str(), layers);
  std::printf("%-10s %-16s %14s %18s\n", "selection", "input", "cold ms/layer", "warm us/request");
  for (EngineSearch search : {EngineSearch::kHeuristicInstant, EngineSearch::kAutotune}) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{1, 3, 32, 32}, {32, 3, 224, 224}}) {
      Served s = Serve(search, 1, {0});
      ClientOptions co;
      co.address = s.server->address();
      ConvServeClient client(co);
      Must(client.LoadGraph(*graph), "LoadGraph");
      const v1::InferRequest request = Request(*graph, shape);
      Must(client.Infer(request), "Infer");
      const double cold = s.runner->Take()[0].build;
      std::vector<double> warm;
      for (int i = 0; i < 50; ++i) {
        Must(client.Infer(request), "Infer");
        warm.push_back(s.runner->Take()[0].build);
      }
      std::printf("%-10s %-16s %14.2f %18.2f\n", EngineSearchName(search),
                  absl::StrJoin(shape, "x").c_str(), cold * 1e3 / layers, Median(warm) * 1e6);
    }
  }

  Served s = Serve(EngineSearch::kAutotune, 2, {});
  ClientOptions co;
  co.address = s.server->address();
  ConvServeClient client(co);
  Must(client.LoadGraph(*graph), "LoadGraph");
  std::printf("\n== latency breakdown, autotune, median of 200 sequential requests (us)\n");
  std::printf("%-16s %8s %8s %8s %8s %8s %8s %10s\n", "input", "e2e", "queue", "plan", "h2d",
              "compute", "d2h", "grpc+rest");
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1, 3, 32, 32}, {32, 3, 224, 224}}) {
    const v1::InferRequest request = Request(*graph, shape);
    for (int i = 0; i < 20; ++i) Must(client.Infer(request), "Infer");
    s.runner->Take();
    std::vector<double> e2e;
    for (int i = 0; i < 200; ++i) {
      const auto start = std::chrono::steady_clock::now();
      Must(client.Infer(request), "Infer");
      e2e.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::vector<InferTimings> t = s.runner->Take();
    std::vector<double> q, b, h, c, d, rest;
    for (size_t i = 0; i < t.size() && i < e2e.size(); ++i) {
      q.push_back(t[i].queue);
      b.push_back(t[i].build);
      h.push_back(t[i].h2d);
      c.push_back(t[i].compute);
      d.push_back(t[i].d2h);
      rest.push_back(e2e[i] - t[i].queue - t[i].build - t[i].h2d - t[i].compute - t[i].d2h);
    }
    std::printf("%-16s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %10.1f\n",
                absl::StrJoin(shape, "x").c_str(), Median(e2e) * 1e6, Median(q) * 1e6,
                Median(b) * 1e6, Median(h) * 1e6, Median(c) * 1e6, Median(d) * 1e6,
                Median(rest) * 1e6);
  }

  std::printf("\n== throughput, autotune, every GPU, 2 workers per GPU, %.0f s per level\n",
              absl::GetFlag(FLAGS_seconds));
  std::printf("%-16s %12s %12s %12s %12s\n", "input", "concurrency", "requests/s", "images/s",
              "p50 ms");
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1, 3, 64, 64}, {16, 3, 224, 224}}) {
    const v1::InferRequest request = Request(*graph, shape);
    for (int concurrency : {1, 8, 64}) {
      const Throughput t = Measure(co, request, concurrency);
      std::printf("%-16s %12d %12.0f %12.0f %12.2f\n", absl::StrJoin(shape, "x").c_str(),
                  concurrency, t.requests_per_second, t.requests_per_second * shape[0],
                  t.p50_ms);
    }
    s.runner->Take();
  }

  // Plans are per worker, so W workers per GPU mean W plans per key; one
  // worker is what sharing one plan per GPU behind a lock would give.
  std::printf("\n== workers per GPU (GPU 0 only), concurrency 64, autotune\n");
  std::printf("%-16s %8s %12s %12s\n", "input", "workers", "requests/s", "p50 ms");
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1, 3, 64, 64}, {4, 3, 128, 128}}) {
    for (int workers : {1, 2, 4}) {
      Served one = Serve(EngineSearch::kAutotune, workers, {0});
      ClientOptions one_options;
      one_options.address = one.server->address();
      ConvServeClient loader(one_options);
      Must(loader.LoadGraph(*graph), "LoadGraph");
      const v1::InferRequest request = Request(*graph, shape);
      // Plans on every worker first.
      for (int w = 0; w < 4 * workers; ++w) Must(loader.Infer(request), "Infer");
      const Throughput t = Measure(one_options, request, 64);
      std::printf("%-16s %8d %12.0f %12.2f\n", absl::StrJoin(shape, "x").c_str(), workers,
                  t.requests_per_second, t.p50_ms);
    }
  }
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
