// convserve-load: loads a graph from a text file (weights from a seed when the
// file has none), sends inference requests and prints an output summary and
// latencies. The full load generator (sweeps, open loop) builds on this.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/convserve_client.h"
#include "client/graph_file.h"
#include "client/tensor_summary.h"

ABSL_FLAG(std::string, server, "localhost:8001", "server address host:port");
ABSL_FLAG(std::string, graph_file, "",
          "graph definition to load (protobuf text format, or JSON if it ends in .json)");
ABSL_FLAG(std::string, graph, "", "an already loaded graph to use (name or id)");
ABSL_FLAG(uint64_t, seed, 1, "seed for weights the graph file leaves empty");
ABSL_FLAG(bool, fill_bias, true, "also fill empty biases from --seed");
ABSL_FLAG(std::string, input_shape, "",
          "logical input dims N,C,H,W (N,C,D,H,W for 3-D); default 1,C,32,32");
ABSL_FLAG(uint64_t, input_seed, 7, "seed of the random input tensor");
ABSL_FLAG(std::string, input_file, "", "raw input bytes instead of a random tensor");
ABSL_FLAG(std::string, save_input, "", "write the input bytes sent to this file");
ABSL_FLAG(std::string, save_output, "", "write the first response's output bytes to this file");
ABSL_FLAG(std::string, protocol, "convserve", "convserve (convserve.v1.Infer) or kserve (ModelInfer)");
ABSL_FLAG(int, requests, 1, "inference requests to send, one after another");
ABSL_FLAG(bool, unload, false, "unload the graph at the end");
ABSL_FLAG(double, wait_for_server, 0,
          "seconds to wait for the server to answer ServerLive before starting (0: no wait)");

namespace convserve {
namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "convserve-load: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(absl::StrCat("--input_shape '", text,
                                                     "' is not a comma-separated list of ints"));
    }
    shape.push_back(d);
  }
  return shape;
}

// Logical N, C, ... -> the dims in byte order, as KServe expects.
std::vector<int64_t> PhysicalDims(const std::vector<int64_t>& logical, v1::Layout layout) {
  if (layout != v1::NHWC && layout != v1::NDHWC) return logical;
  std::vector<int64_t> physical = {logical[0]};
  physical.insert(physical.end(), logical.begin() + 2, logical.end());
  physical.push_back(logical[1]);
  return physical;
}

std::string KServeType(v1::DataType type) {
  return type == v1::FLOAT16 ? "FP16" : type == v1::BFLOAT16 ? "BF16" : "FP32";
}

int Run() {
  ClientOptions options;
  options.address = absl::GetFlag(FLAGS_server);
  ConvServeClient client(options);
  const double wait_seconds = absl::GetFlag(FLAGS_wait_for_server);
  if (wait_seconds > 0) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(wait_seconds * 1000));
    absl::StatusOr<bool> live = client.ServerLive();
    while (!(live.ok() && *live) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      live = client.ServerLive();
    }
    if (!live.ok()) return Fail("waiting for the server", live.status());
  }

  std::string graph_ref = absl::GetFlag(FLAGS_graph);
  const std::string graph_file = absl::GetFlag(FLAGS_graph_file);
  if (graph_ref.empty() == graph_file.empty()) {
    return Fail("usage", absl::InvalidArgumentError("give exactly one of --graph_file, --graph"));
  }
  if (!graph_file.empty()) {
    absl::StatusOr<v1::GraphDef> graph = ReadGraphFile(graph_file);
    if (!graph.ok()) return Fail("reading the graph", graph.status());
    absl::Status filled =
        FillParameters(absl::GetFlag(FLAGS_seed), absl::GetFlag(FLAGS_fill_bias), &*graph);
    if (!filled.ok()) return Fail("filling parameters", filled);
    absl::StatusOr<v1::LoadGraphResponse> loaded = client.LoadGraph(*graph);
    if (!loaded.ok()) return Fail("LoadGraph", loaded.status());
    std::printf("loaded graph '%s' id=%s%s\n", graph->name().c_str(), loaded->graph_id().c_str(),
                loaded->already_loaded() ? " (already loaded)" : "");
    graph_ref = graph->name();
  }
  absl::StatusOr<v1::GraphInfo> info = client.GetGraph(graph_ref);
  if (!info.ok()) return Fail("GetGraph", info.status());
  const v1::GraphDef& def = info->definition();

  std::vector<int64_t> shape;
  if (absl::GetFlag(FLAGS_input_shape).empty()) {
    shape = {1, def.input_channels()};
    shape.resize(2 + def.spatial_rank(), 32);
  } else {
    absl::StatusOr<std::vector<int64_t>> parsed = ParseShape(absl::GetFlag(FLAGS_input_shape));
    if (!parsed.ok()) return Fail("usage", parsed.status());
    shape = *parsed;
  }
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::string input;
  if (!absl::GetFlag(FLAGS_input_file).empty()) {
    absl::StatusOr<std::string> bytes = ReadFileBytes(absl::GetFlag(FLAGS_input_file));
    if (!bytes.ok()) return Fail("reading --input_file", bytes.status());
    input = *std::move(bytes);
  } else {
    input = RandomTensorBytes(def.data_type(), count, absl::GetFlag(FLAGS_input_seed));
  }
  if (!absl::GetFlag(FLAGS_save_input).empty()) {
    absl::Status saved = WriteFileBytes(absl::GetFlag(FLAGS_save_input), input);
    if (!saved.ok()) return Fail("--save_input", saved);
  }

  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "convserve" && protocol != "kserve") {
    return Fail("usage", absl::InvalidArgumentError("--protocol must be convserve or kserve"));
  }
  v1::InferRequest request;
  request.set_graph(graph_ref);
  for (int64_t d : shape) request.mutable_input()->add_shape(d);
  request.mutable_input()->set_data(input);
  inference::ModelInferRequest kserve_request;
  kserve_request.set_model_name(def.name());
  auto* tensor = kserve_request.add_inputs();
  tensor->set_name("input");
  tensor->set_datatype(KServeType(def.data_type()));
  for (int64_t d : PhysicalDims(shape, def.layout())) tensor->add_shape(d);
  kserve_request.add_raw_input_contents(input);

  std::printf("input  [%s] %s %s, %zu bytes\n", absl::StrJoin(shape, ", ").c_str(),
              v1::DataType_Name(def.data_type()).c_str(), v1::Layout_Name(def.layout()).c_str(),
              input.size());
  std::vector<double> latencies_ms;
  for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_requests)); ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<int64_t> out_shape;
    std::string out_bytes;
    if (protocol == "convserve") {
      absl::StatusOr<v1::InferResponse> response = client.Infer(request);
      if (!response.ok()) return Fail("Infer", response.status());
      out_shape.assign(response->output().shape().begin(), response->output().shape().end());
      out_bytes = std::move(*response->mutable_output()->mutable_data());
    } else {
      absl::StatusOr<inference::ModelInferResponse> response = client.ModelInfer(kserve_request);
      if (!response.ok()) return Fail("ModelInfer", response.status());
      if (response->outputs_size() != 1 || response->raw_output_contents_size() != 1) {
        return Fail("ModelInfer", absl::InternalError("response lacks its one output"));
      }
      out_shape.assign(response->outputs(0).shape().begin(), response->outputs(0).shape().end());
      out_bytes = std::move(*response->mutable_raw_output_contents(0));
    }
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (i == 0) {
      std::printf("output %s\n",
                  FormatSummary(out_shape, def.data_type(), Summarize(def.data_type(), out_bytes))
                      .c_str());
      if (!absl::GetFlag(FLAGS_save_output).empty()) {
        absl::Status saved = WriteFileBytes(absl::GetFlag(FLAGS_save_output), out_bytes);
        if (!saved.ok()) return Fail("--save_output", saved);
      }
    }
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const auto at = [&](double q) {
    return latencies_ms[std::min(latencies_ms.size() - 1,
                                 static_cast<size_t>(q * latencies_ms.size()))];
  };
  std::printf("%zu requests (%s): latency ms min=%.3f p50=%.3f p99=%.3f max=%.3f\n",
              latencies_ms.size(), protocol.c_str(), latencies_ms.front(), at(0.5), at(0.99),
              latencies_ms.back());
  if (absl::GetFlag(FLAGS_unload)) {
    absl::Status unloaded = client.UnloadGraph(graph_ref);
    if (!unloaded.ok()) return Fail("UnloadGraph", unloaded);
    std::printf("unloaded '%s'\n", graph_ref.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace convserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "convserve-load: load a graph and send inference requests.\n"
      "  convserve-load --server=localhost:8001 "
      "--graph_file=deploy/examples/resnet_block.textproto --input_shape=1,16,32,32");
  absl::ParseCommandLine(argc, argv);
  return convserve::Run();
}
