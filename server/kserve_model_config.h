// Triton's model configuration (inference.ModelConfig) of a loaded graph, as
// the ModelConfig RPC returns it. Part of the wire translation library.
#ifndef CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_
#define CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_

#include "engine/graph.h"
#include "engine/runtime/dynamic_batcher.h"
#include "inference/model_config.pb.h"

namespace convserve {

// Name, platform "convserve", the input and output with data type and dims
// in byte order (-1 where variable, as ModelMetadata), the format for 2-D
// graphs, and parameters graph_id, layout and layers. Without `batching`
// (null: the graph does not batch) max_batch_size is 0 and the batch
// dimension is in the dims; with it, max_batch_size and dynamic_batching
// are set and the dims leave the batch dimension out, as Triton's do.
void KServeModelConfigToProto(const Graph& graph, inference::ModelConfig* config,
                              const DynamicBatchingOptions* batching = nullptr);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_MODEL_CONFIG_H_
