// Triton's model configuration (inference.ModelConfig) of a loaded graph, as
// the ModelConfig RPC returns it. Part of the wire translation library.
#ifndef CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_
#define CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_

#include "engine/graph.h"
#include "inference/model_config.pb.h"

namespace convserve {

// Name, platform "convserve", max_batch_size 0 (the server does not batch
// requests, so the batch dimension is in the dims), the input and output with
// data type and dims in byte order (-1 where variable, as ModelMetadata), the
// format for 2-D graphs, and parameters graph_id, layout and layers. No
// scheduling settings: convserve has no dynamic batching.
void KServeModelConfigToProto(const Graph& graph, inference::ModelConfig* config);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_
