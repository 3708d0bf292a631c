// convserve.v1.ConvServe over gRPC's callback API. Inference is handed to the
// core's workers; gRPC threads only translate and queue.
#ifndef CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
#define CONVSERVE_SERVER_CONVSERVE_SERVICE_H_

#include <functional>

#include "convserve/v1/convserve.grpc.pb.h"
#include "server/graph_management_policy.h"
#include "server/inference_core.h"
#include "server/server_metrics.h"
#include "server/tensor_wire.h"

namespace convserve {

// Infer takes gRPC's raw bytes (server/tensor_wire.h): its tensors are
// copied at most once on the host. Every other call takes messages.
using ConvServeServiceBase =
    v1::ConvServe::WithRawCallbackMethod_Infer<v1::ConvServe::CallbackService>;

class ConvServeService final : public ConvServeServiceBase {
 public:
  // `core`, `metrics` and `management` outlive the service; `management`
  // decides who may call LoadGraph and UnloadGraph.
  ConvServeService(InferenceCore* core, ServerMetrics* metrics,
                   const GraphManagementPolicy* management)
      : core_(core), metrics_(metrics), management_(management) {}

  grpc::ServerUnaryReactor* LoadGraph(grpc::CallbackServerContext* context,
                                      const v1::LoadGraphRequest* request,
                                      v1::LoadGraphResponse* response) override;
  grpc::ServerUnaryReactor* UnloadGraph(grpc::CallbackServerContext* context,
                                        const v1::UnloadGraphRequest* request,
                                        v1::UnloadGraphResponse* response) override;
  grpc::ServerUnaryReactor* ListGraphs(grpc::CallbackServerContext* context,
                                       const v1::ListGraphsRequest* request,
                                       v1::ListGraphsResponse* response) override;
  grpc::ServerUnaryReactor* GetGraph(grpc::CallbackServerContext* context,
                                     const v1::GetGraphRequest* request,
                                     v1::GetGraphResponse* response) override;
  grpc::ServerUnaryReactor* Infer(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatistics(grpc::CallbackServerContext* context,
                                          const v1::GetStatisticsRequest* request,
                                          v1::GetStatisticsResponse* response) override;

  // Infer after its bytes were parsed, without gRPC: checks `wire`, runs it
  // and calls `done` once, with the serialized response on success (null
  // otherwise). `cancelled` as in InferCall. The request fuzzer calls it.
  using InferDone = std::function<void(const absl::Status& status, grpc::ByteBuffer* response)>;
  void StartInfer(WireConvServeRequest wire, std::function<bool()> cancelled, InferDone done);

 private:
  InferenceCore* const core_;
  ServerMetrics* const metrics_;
  const GraphManagementPolicy* const management_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
