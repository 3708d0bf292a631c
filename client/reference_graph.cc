#include "client/reference_graph.h"

#include "server/proto_convert.h"

namespace convserve {

absl::StatusOr<DType> DTypeFromDef(v1::DataType type) { return DTypeFromProto(type, "data_type"); }

absl::StatusOr<std::shared_ptr<const Graph>> ReferenceGraph(const v1::GraphDef& definition) {
  v1::GraphDef copy = definition;  // GraphSpecFromProto moves the weights out
  absl::StatusOr<GraphSpec> spec = GraphSpecFromProto(&copy);
  if (!spec.ok()) return spec.status();
  return Graph::Create(*std::move(spec));
}

}  // namespace convserve
