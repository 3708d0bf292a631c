// Triton's model statistics (inference.ModelStatistics) from the per-graph
// figures the server keeps (ServerMetrics::Statistics).
#ifndef CONVSERVE_SERVER_KSERVE_STATISTICS_H_
#define CONVSERVE_SERVER_KSERVE_STATISTICS_H_

#include <string>

#include "convserve/v1/convserve.pb.h"
#include "inference/grpc_predict_v2.pb.h"

namespace convserve {

// Model `name`, version "1", from `figures` (all zero for a graph that has
// served nothing). As Triton counts: execution_count is executions of the
// layers (a dynamic batch is one), inference_count the inferences they made
// (the sum of N of the requests when the graph batches, else one per
// request), and batch_stats has one entry per batch size (the execution's N
// when the graph batches, else 1) with each execution's stages once. The
// inference stages are per request (a request of a batch counts its batch's
// stages):
//   success         answered OK, arrival to answer
//   fail            refused or failed, arrival to the error
//   queue           waiting for a worker
//   compute_input   host to device (staging included; ~0 on the CPU backend)
//   compute_infer   plan lookup or build, then every layer
//   compute_output  device to host
void KServeStatisticsToProto(const std::string& name, const v1::GraphStatistics& figures,
                             inference::ModelStatistics* statistics);

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_STATISTICS_H_
