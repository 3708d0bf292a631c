#include "tests/observability/observed_traffic.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "tests/observability/http_get.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {
namespace {

constexpr int kInputChannels = 3;

}  // namespace

v1::GraphDef ObservedGraph(const std::string& name) {
  v1::GraphDef graph;
  graph.set_name(name);
  graph.set_data_type(v1::FLOAT32);
  graph.set_layout(v1::NCHW);
  graph.set_input_channels(kInputChannels);
  const int widths[] = {8, 4};
  for (int i = 0; i < 2; ++i) {
    v1::ConvLayer* layer = graph.add_layers();
    layer->set_out_channels(widths[i]);
    for (int d = 0; d < 2; ++d) {
      layer->add_kernel_size(3);
      layer->add_pad_before(1);
      layer->add_pad_after(1);
    }
    layer->mutable_activation()->set_kind(i == 0 ? v1::Activation::RELU : v1::Activation::SWISH);
  }
  if (!FillParameters(7, true, &graph).ok()) std::abort();  // the graph above is valid
  return graph;
}

std::vector<TrafficRequest> ObservedRequests(const v1::GraphDef& graph) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, kInputChannels, 8, 8}, {2, kInputChannels, 6, 10}, {1, kInputChannels, 12, 4}};
  std::vector<TrafficRequest> requests;
  for (size_t i = 0; i < shapes.size(); ++i) {
    requests.push_back(MakeTrafficRequest(graph, shapes[i], 40 + i, 1e-5));
  }
  return requests;
}

std::map<std::string, int64_t> SendFailingRequests(const std::string& address,
                                                   const std::string& graph,
                                                   const FailingRequests& failing) {
  ClientOptions options;
  options.address = address;
  ConvServeClient client(options);
  std::map<std::string, int64_t> codes;
  const auto send = [&](const std::string& name, int64_t channels, uint64_t seed) {
    v1::InferRequest request;
    request.set_graph(name);
    const std::vector<int64_t> shape = {1, channels, 5, 5};
    for (int64_t d : shape) request.mutable_input()->add_shape(d);
    request.mutable_input()->set_data(RandomTensorBytes(v1::FLOAT32, channels * 25, seed));
    ++codes[absl::StatusCodeToString(client.Infer(request).status().code())];
  };
  for (int i = 0; i < failing.unknown_graph; ++i) send(graph + "_not_loaded", kInputChannels, i);
  for (int i = 0; i < failing.wrong_channels; ++i) send(graph, kInputChannels + 1, i);
  return codes;
}

absl::Status SendKServeRequests(const std::string& address, const v1::GraphDef& graph,
                                int count) {
  ClientOptions options;
  options.address = address;
  ConvServeClient client(options);
  const TrafficRequest first = ObservedRequests(graph)[0];
  inference::ModelInferRequest request;
  request.set_model_name(graph.name());
  inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : first.request.input().shape()) input->add_shape(d);
  request.add_raw_input_contents(first.request.input().data());
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<inference::ModelInferResponse> response = client.ModelInfer(request);
    if (!response.ok()) return response.status();
    if (response->raw_output_contents_size() != 1 ||
        response->raw_output_contents(0).size() != first.expected.size() ||
        RelativeL2Error(DecodeToDouble(first.dtype, response->raw_output_contents(0)),
                        DecodeToDouble(first.dtype, first.expected)) > first.bound) {
      return absl::InternalError("a KServe answer differs from the CPU reference");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FetchMetrics(int port) {
  absl::StatusOr<HttpResponse> response = HttpGet(port, "/metrics");
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::InternalError(absl::StrCat("GET /metrics on port ", port, ": HTTP ",
                                            response->status, "\n", response->headers));
  }
  return response->body;
}

}  // namespace convserve
