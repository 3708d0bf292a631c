#include "tests/test_util/traffic.h"

#include <grpcpp/support/status.h>

#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "engine/cpu/cpu_backend.h"
#include "server/proto_convert.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {

TrafficResult SendTraffic(const std::string& address, const std::vector<TrafficRequest>& requests,
                          int threads, int per_thread,
                          const std::function<void(int64_t answered)>& after_each) {
  TrafficResult total;
  std::mutex mu;
  std::atomic<int64_t> answered{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ClientOptions options;
      options.address = address;
      options.timeout = std::chrono::seconds(60);
      ConvServeClient client(options);
      TrafficResult mine;
      for (int i = 0; i < per_thread; ++i) {
        const TrafficRequest& r = requests[(t + i) % requests.size()];
        ++mine.sent;
        absl::StatusOr<v1::InferResponse> response = client.Infer(r.request);
        if (!response.ok()) {
          const std::string code = absl::StatusCodeToString(response.status().code());
          ++mine.errors[code];
          mine.messages.emplace(code, response.status().message());
        } else if (response->output().data().size() != r.expected.size()) {
          ++mine.wrong;
        } else {
          const double error = RelativeL2Error(DecodeToDouble(r.dtype, response->output().data()),
                                               DecodeToDouble(r.dtype, r.expected));
          mine.max_error = std::max(mine.max_error, error);
          (error <= r.bound ? mine.correct : mine.wrong)++;
        }
        const int64_t done = ++answered;
        if (after_each) after_each(done);
      }
      std::lock_guard<std::mutex> lock(mu);
      total.sent += mine.sent;
      total.correct += mine.correct;
      total.wrong += mine.wrong;
      total.max_error = std::max(total.max_error, mine.max_error);
      for (const auto& [code, count] : mine.errors) total.errors[code] += count;
      total.messages.insert(mine.messages.begin(), mine.messages.end());
    });
  }
  for (std::thread& w : workers) w.join();
  return total;
}

TrafficRequest MakeTrafficRequest(const v1::GraphDef& graph, const std::vector<int64_t>& shape,
                                  uint64_t seed, double bound) {
  TrafficRequest r;
  r.bound = bound;
  r.request.set_graph(graph.name());
  int64_t count = 1;
  for (int64_t d : shape) {
    r.request.mutable_input()->add_shape(d);
    count *= d;
  }
  r.request.mutable_input()->set_data(RandomTensorBytes(graph.data_type(), count, seed));
  v1::GraphDef copy = graph;
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
  absl::StatusOr<std::shared_ptr<const Graph>> compiled =
      spec.ok() ? Graph::Create(*std::move(spec))
                : absl::StatusOr<std::shared_ptr<const Graph>>(spec.status());
  if (!compiled.ok()) return r;  // expected stays empty: every answer counts as wrong
  r.dtype = (*compiled)->spec().dtype;
  static CpuBackend* cpu = CpuBackend::Create({0})->release();
  absl::StatusOr<std::shared_ptr<Executable>> executable = cpu->Compile(*compiled, shape);
  if (!executable.ok()) return r;
  std::string out(NumElements((*executable)->output_shape()) * DTypeSize(r.dtype), '\0');
  const std::string& in = r.request.input().data();
  if ((*executable)
          ->Run(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(in.data()), in.size()),
                absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()))
          .ok()) {
    r.expected = std::move(out);
  }
  return r;
}

}  // namespace convserve
