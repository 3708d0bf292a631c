// GraphDef -> engine Graph on the client, so convserve-load --verify can run
// the graph on the CPU reference backend with exactly the server's
// translation (server/proto_convert, library convserve_wire).
#ifndef CONVSERVE_CLIENT_REFERENCE_GRAPH_H_
#define CONVSERVE_CLIENT_REFERENCE_GRAPH_H_

#include <memory>

#include "absl/status/statusor.h"
#include "convserve/v1/convserve.pb.h"
#include "engine/graph.h"

namespace convserve {

// The validated graph, weights copied. INVALID_ARGUMENT names the field.
absl::StatusOr<std::shared_ptr<const Graph>> ReferenceGraph(const v1::GraphDef& definition);

// v1 enum -> engine enum; INVALID_ARGUMENT for unspecified or unknown values.
absl::StatusOr<DType> DTypeFromDef(v1::DataType type);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_REFERENCE_GRAPH_H_
