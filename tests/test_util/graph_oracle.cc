#include "tests/test_util/graph_oracle.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/convserve_client.h"
#include "engine/graph.h"
#include "server/proto_convert.h"
#include "tests/test_util/for_each_on_threads.h"
#include "tests/test_util/naive_conv.h"

namespace convserve {
namespace {

absl::StatusOr<OracleReference> ComputeReference(const RandomGraphCase& graph_case) {
  v1::GraphDef copy = graph_case.graph;
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::shared_ptr<const Graph>> graph = Graph::Create(*std::move(spec));
  if (!graph.ok()) return graph.status();
  const absl::Status shapes = (*graph)->InferShapes(graph_case.input_shape).status();
  if (!shapes.ok()) return shapes;
  OracleReference reference;
  reference.values =
      NaiveForward(**graph, graph_case.input_shape, graph_case.input, &reference.shape,
                   /*threads=*/1);
  return reference;
}

// Records `error` of graph `graph` in `report`'s largest errors.
void RecordError(OracleReport* report, DType dtype, const std::string& graph, double error) {
  const auto [max_error, first] = report->max_error.try_emplace(dtype, error);
  if (first || error > max_error->second) {
    max_error->second = error;
    report->worst_graph[dtype] = graph;
  }
}

// Compares one output (logical `shape`, bytes in the graph's layout) of
// graph `graph` with the reference; records the error in `report` and
// returns a failure text, or "" when within `bound`.
std::string CompareOutput(const OracleReference& reference, DType dtype, double bound,
                          const std::string& graph, const Shape& shape, const std::string& bytes,
                          OracleReport* report) {
  const double kFailed = std::numeric_limits<double>::infinity();
  if (shape != reference.shape) {
    RecordError(report, dtype, graph, kFailed);
    return absl::StrCat("output shape ", ShapeToString(shape), ", reference ",
                        ShapeToString(reference.shape));
  }
  const size_t expected_bytes = reference.values.size() * DTypeSize(dtype);
  if (bytes.size() != expected_bytes) {
    RecordError(report, dtype, graph, kFailed);
    return absl::StrCat("output holds ", bytes.size(), " bytes, expected ", expected_bytes);
  }
  // RelativeL2Error is infinite when the output holds a NaN.
  const double error = RelativeL2Error(DecodeToDouble(dtype, bytes), reference.values);
  RecordError(report, dtype, graph, error);
  if (error <= bound) return "";
  return absl::StrCat("relative L2 error ", error, " > bound ", bound,
                      std::isinf(error) ? " (NaN in the output)" : "");
}

// The convserve.v1 Infer of `graph_case`; "" or a failure text.
std::string CheckInfer(ConvServeClient* client, const RandomGraphCase& graph_case,
                       const OracleReference& reference, DType dtype, double bound,
                       OracleReport* report) {
  v1::InferRequest request;
  request.set_graph(graph_case.graph.name());
  v1::Tensor* input = request.mutable_input();
  for (int64_t d : graph_case.input_shape) input->add_shape(d);
  input->set_data_type(graph_case.graph.data_type());
  input->set_layout(graph_case.graph.layout());
  input->set_data(graph_case.input);
  absl::StatusOr<v1::InferResponse> response = client->Infer(request);
  if (!response.ok()) return response.status().ToString();
  const v1::Tensor& output = response->output();
  const Shape shape(output.shape().begin(), output.shape().end());
  return CompareOutput(reference, dtype, bound, graph_case.graph.name(), shape, output.data(),
                       report);
}

// The KServe ModelInfer of `graph_case`, raw bytes in and out; KServe shapes
// are in byte order. "" or a failure text.
std::string CheckModelInfer(ConvServeClient* client, const RandomGraphCase& graph_case,
                            const OracleReference& reference, DType dtype, double bound,
                            OracleReport* report) {
  const bool channels_last =
      graph_case.graph.layout() == v1::NHWC || graph_case.graph.layout() == v1::NDHWC;
  inference::ModelInferRequest request;
  request.set_model_name(graph_case.graph.name());
  inference::ModelInferRequest::InferInputTensor* input = request.add_inputs();
  input->set_name(kInputName);
  input->set_datatype(KServeDataType(dtype));
  for (int64_t d : PhysicalShape(graph_case.input_shape, channels_last)) input->add_shape(d);
  request.add_raw_input_contents(graph_case.input);
  absl::StatusOr<inference::ModelInferResponse> response = client->ModelInfer(request);
  if (!response.ok()) return response.status().ToString();
  if (response->outputs_size() != 1 || response->raw_output_contents_size() != 1) {
    return absl::StrCat("response has ", response->outputs_size(), " outputs and ",
                        response->raw_output_contents_size(), " raw contents, expected 1 and 1");
  }
  const auto& output = response->outputs(0);
  if (output.datatype() != KServeDataType(dtype)) {
    return absl::StrCat("output datatype ", output.datatype(), ", expected ",
                        KServeDataType(dtype));
  }
  const Shape physical(output.shape().begin(), output.shape().end());
  const Shape expected_physical = PhysicalShape(reference.shape, channels_last);
  // Compared in logical form by CompareOutput; a byte-order shape that does
  // not match is reported as such.
  if (physical != expected_physical) {
    RecordError(report, dtype, graph_case.graph.name(), std::numeric_limits<double>::infinity());
    return absl::StrCat("output shape (byte order) ", ShapeToString(physical), ", expected ",
                        ShapeToString(expected_physical));
  }
  return CompareOutput(reference, dtype, bound, graph_case.graph.name(), reference.shape,
                       response->raw_output_contents(0), report);
}

void RunCase(ConvServeClient* client, const OracleCase& oracle_case, const OracleBounds& bounds,
             OracleReport* report) {
  const RandomGraphCase& graph_case = oracle_case.graph_case();
  const auto fail = [&](const std::string& error) {
    report->failures.push_back({graph_case.description, error});
  };
  ++report->graphs;
  const absl::StatusOr<OracleReference>& reference = oracle_case.reference();
  if (!reference.ok()) return fail(absl::StrCat("reference: ", reference.status().ToString()));
  if (std::all_of(reference->values.begin(), reference->values.end(),
                  [](double v) { return v == 0.0; })) {
    ++report->zero_references;
  }
  absl::StatusOr<v1::LoadGraphResponse> loaded = client->LoadGraph(graph_case.graph);
  if (!loaded.ok()) return fail(absl::StrCat("LoadGraph: ", loaded.status().ToString()));
  const DType dtype = oracle_case.dtype();
  const double bound = bounds.For(dtype);
  report->requests += 2;
  const std::string infer = CheckInfer(client, graph_case, *reference, dtype, bound, report);
  if (!infer.empty()) fail(absl::StrCat("convserve.v1 Infer: ", infer));
  const std::string model_infer =
      CheckModelInfer(client, graph_case, *reference, dtype, bound, report);
  if (!model_infer.empty()) fail(absl::StrCat("KServe ModelInfer: ", model_infer));
  const absl::Status unloaded = client->UnloadGraph(graph_case.graph.name());
  if (!unloaded.ok()) fail(absl::StrCat("UnloadGraph: ", unloaded.ToString()));
}

}  // namespace

double OracleBounds::For(DType dtype) const {
  switch (dtype) {
    case DType::kFloat32:
      return float32;
    case DType::kFloat16:
      return float16;
    case DType::kBFloat16:
      return bfloat16;
  }
  return 0.0;
}

DType OracleCase::dtype() const {
  return DTypeFromProto(case_.graph.data_type(), "data_type").value_or(DType::kFloat32);
}

const absl::StatusOr<OracleReference>& OracleCase::reference() const {
  absl::call_once(once_, [this] { reference_ = ComputeReference(case_); });
  return *reference_;
}

OracleCases MakeOracleCases(std::vector<RandomGraphCase> graph_cases) {
  OracleCases cases;
  cases.reserve(graph_cases.size());
  for (RandomGraphCase& graph_case : graph_cases) {
    cases.push_back(std::make_shared<const OracleCase>(std::move(graph_case)));
  }
  return cases;
}

void ComputeReferences(const OracleCases& cases, int threads) {
  ForEachOnThreads(cases.size(), threads, [&](size_t i) { cases[i]->reference(); });
}

void OracleReport::Merge(const OracleReport& other) {
  graphs += other.graphs;
  requests += other.requests;
  zero_references += other.zero_references;
  failures.insert(failures.end(), other.failures.begin(), other.failures.end());
  for (const auto& [dtype, error] : other.max_error) {
    RecordError(this, dtype, other.worst_graph.at(dtype), error);
  }
  wall_seconds = std::max(wall_seconds, other.wall_seconds);
}

OracleReport RunOracle(const std::string& address, const OracleCases& cases,
                       const OracleOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ClientOptions client_options;
  client_options.address = address;
  client_options.timeout = options.timeout;
  absl::Mutex mu;
  OracleReport report;
  const int threads =
      std::max(1, std::min<int>(options.client_threads, static_cast<int>(cases.size())));
  std::atomic<size_t> next{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      ConvServeClient client(client_options);
      OracleReport mine;
      for (size_t i = next++; i < cases.size(); i = next++) {
        RunCase(&client, *cases[i], options.bounds, &mine);
      }
      absl::MutexLock lock(&mu);
      report.Merge(mine);
    });
  }
  for (std::thread& client : clients) client.join();
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string FormatCaseTable(const OracleCases& cases) {
  static constexpr v1::Layout kLayouts[] = {v1::NCHW, v1::NHWC, v1::NCDHW, v1::NDHWC};
  static constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  std::map<std::pair<DType, v1::Layout>, int> counts;
  for (const auto& oracle_case : cases) {
    ++counts[{oracle_case->dtype(), oracle_case->graph_case().graph.layout()}];
  }
  std::string table = absl::StrFormat("%-10s", "graphs");
  for (v1::Layout layout : kLayouts) absl::StrAppendFormat(&table, "%7s", v1::Layout_Name(layout));
  absl::StrAppendFormat(&table, "%7s\n", "all");
  for (DType dtype : kDTypes) {
    absl::StrAppendFormat(&table, "%-10s", DTypeName(dtype));
    int all = 0;
    for (v1::Layout layout : kLayouts) {
      const int count = counts[{dtype, layout}];
      all += count;
      absl::StrAppendFormat(&table, "%7d", count);
    }
    absl::StrAppendFormat(&table, "%7d\n", all);
  }
  return table;
}

std::string FormatReportLine(const OracleReport& report, const OracleBounds& bounds) {
  std::string line =
      absl::StrFormat("graphs %d  requests %d  failures %d  zero-refs %d", report.graphs,
                      report.requests, report.failures.size(), report.zero_references);
  for (const auto& [dtype, error] : report.max_error) {
    const auto worst = report.worst_graph.find(dtype);
    absl::StrAppendFormat(&line, "  %s max %.2e (bound %.0e, %s)", DTypeName(dtype), error,
                          bounds.For(dtype),
                          worst != report.worst_graph.end() ? worst->second : "?");
  }
  absl::StrAppendFormat(&line, "  %.1f s", report.wall_seconds);
  return line;
}

std::string FormatFailures(const OracleReport& report) {
  std::string text;
  for (const OracleFailure& failure : report.failures) {
    absl::StrAppend(&text, failure.description, "\n    -> ", failure.error, "\n");
  }
  return text;
}

}  // namespace convserve
