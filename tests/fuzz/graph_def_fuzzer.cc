// libFuzzer target: a GraphDef as LoadGraph receives it (binary protobuf),
// through the server's conversion (GraphSpecFromProto) and validation
// (Graph::Create), then shape inference and the compute cost of a few input
// shapes. Oracles: a rejected graph is INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED, an accepted one has the same id when made again, and
// its GraphInfo describes what was loaded.
#include <cstdio>
#include <cstdlib>

#include "engine/compute_cost.h"
#include "engine/graph.h"
#include "server/proto_convert.h"
#include "tests/fuzz/fuzz_server.h"

namespace convserve {
namespace {

void Expect(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "graph_def_fuzzer: %s\n", what);
  std::abort();
}

void ExpectRejection(const absl::Status& status) {
  Expect(absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status),
         status.ToString().c_str());
}

absl::StatusOr<std::shared_ptr<const Graph>> GraphFromBytes(const uint8_t* data, size_t size) {
  v1::GraphDef proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) {
    return absl::InvalidArgumentError("not a GraphDef");
  }
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&proto);
  if (!spec.ok()) return spec.status();
  return Graph::Create(*std::move(spec));
}

// Input shapes a client might send: every spatial extent `extent`, N = `n`.
Shape InputShape(const Graph& graph, int64_t n, int64_t extent) {
  Shape shape = {n, graph.spec().input_channels};
  for (int d = 0; d < graph.spatial_rank(); ++d) shape.push_back(extent);
  return shape;
}

}  // namespace
}  // namespace convserve

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  convserve::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convserve;
  absl::StatusOr<std::shared_ptr<const Graph>> graph = GraphFromBytes(data, size);
  if (!graph.ok()) {
    ExpectRejection(graph.status());
    return 0;
  }
  absl::StatusOr<std::shared_ptr<const Graph>> again = GraphFromBytes(data, size);
  Expect(again.ok() && (*again)->id() == (*graph)->id(), "the same GraphDef got another id");
  v1::GraphInfo info;
  GraphInfoToProto(**graph, &info);
  Expect(info.id() == (*graph)->id() && info.definition().name() == (*graph)->name() &&
             info.definition().layers_size() == static_cast<int>((*graph)->spec().layers.size()) &&
             info.parameter_bytes() == (*graph)->parameter_bytes(),
         "GraphInfo does not describe the graph");
  for (const auto& [n, extent] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {2, 32}, {3, 300}}) {
    const Shape input = InputShape(**graph, n, extent);
    absl::StatusOr<std::vector<Shape>> shapes = (*graph)->InferShapes(input);
    if (!shapes.ok()) {
      ExpectRejection(shapes.status());
      continue;
    }
    Expect(shapes->size() == (*graph)->spec().layers.size(), "one output shape per layer");
    const double flops = RequestFlops(**graph, *shapes);
    Expect(flops >= 0, "negative compute cost");
    absl::Status affordable = CheckRequestFlops(**graph, input, flops, 1e9);
    if (!affordable.ok()) ExpectRejection(affordable);
  }
  return 0;
}
