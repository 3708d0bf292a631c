// libFuzzer target: a graph file as convserve-load's --graph_file and the
// server's --graph_dir read it. The first byte picks the form (protobuf text,
// JSON, binary), the rest is the file; a graph that parses gets its missing
// weights filled as convserve-load does, then is converted and validated as
// the server does. Oracle: every error is INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED and names the file.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "client/graph_file.h"
#include "engine/graph.h"
#include "server/proto_convert.h"
#include "tests/fuzz/fuzz_server.h"

namespace {

// `path`: what the message must name; null when it need not.
void ExpectRejection(const absl::Status& status, const char* path) {
  if ((absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status)) &&
      (path == nullptr || absl::StrContains(status.message(), path))) {
    return;
  }
  std::fprintf(stderr, "graph_file_fuzzer: %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  convserve::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convserve;
  if (size == 0) return 0;
  static const char* const kPaths[] = {"graph.textproto", "graph.json", "graph.pb"};
  const char* path = kPaths[data[0] % 3];
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<v1::GraphDef> graph = ParseGraphFile(path, bytes);
  if (!graph.ok()) {
    ExpectRejection(graph.status(), path);
    return 0;
  }
  // A bound well below the default keeps the fuzzer's memory small; the
  // check is the same.
  absl::Status filled = FillParameters(/*seed=*/size, /*with_bias=*/(data[0] & 4) != 0, &*graph,
                                       /*max_bytes=*/int64_t{64} << 20);
  if (!filled.ok()) {
    ExpectRejection(filled, nullptr);
    return 0;
  }
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&*graph);
  if (!spec.ok()) {
    ExpectRejection(spec.status(), nullptr);
    return 0;
  }
  absl::StatusOr<std::shared_ptr<const Graph>> created = Graph::Create(*std::move(spec));
  if (!created.ok()) ExpectRejection(created.status(), nullptr);
  return 0;
}
