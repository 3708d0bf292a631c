// convserve.v1.ConvServe. Inference is handed to the
// core's workers; gRPC threads only translate and queue.
#ifndef CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
#define CONVSERVE_SERVER_CONVSERVE_SERVICE_H_

#include <functional>
#include <memory>
#include <vector>

#include "convserve/v1/convserve.grpc.pb.h"
#include "server/graph_management_policy.h"
#include "server/inference_core.h"
#include "server/queued_calls.h"
#include "server/server_metrics.h"
#include "server/tensor_wire.h"

namespace convserve {

// The methods on gRPC's completion queues (server/queued_calls.h). Infer
// takes gRPC's raw bytes (server/tensor_wire.h): its tensors are copied at
// most once on the host. LoadGraph takes them too, parsed on the control
// thread that runs it: a graph's weights can be hundreds of MB, and gRPC
// would parse them on a queue thread, whose other calls would wait. Every
// other call takes messages.
using ConvServeAsyncService = v1::ConvServe::WithRawMethod_Infer<
    v1::ConvServe::WithRawMethod_LoadGraph<v1::ConvServe::AsyncService>>;

class ConvServeService final {
 public:
  // `core`, `metrics` and `management` outlive the service; `management`
  // decides who may call LoadGraph and UnloadGraph.
  ConvServeService(InferenceCore* core, ServerMetrics* metrics,
                   const GraphManagementPolicy* management)
      : core_(core), metrics_(metrics), management_(management) {}

  // `request` holds a v1::LoadGraphRequest, `response` gets a
  // v1::LoadGraphResponse.
  // Parses and then frees the request's bytes (weights of up to hundreds of
  // MB), which the call would otherwise hold through the warm-up.
  void LoadGraph(ServerCall* rpc, grpc::ByteBuffer* request, grpc::ByteBuffer* response);
  void UnloadGraph(ServerCall* rpc, const v1::UnloadGraphRequest* request,
                   v1::UnloadGraphResponse* response);
  void ListGraphs(ServerCall* rpc, const v1::ListGraphsRequest* request,
                  v1::ListGraphsResponse* response);
  void GetGraph(ServerCall* rpc, const v1::GetGraphRequest* request,
                v1::GetGraphResponse* response);
  void Infer(ServerCall* rpc, const grpc::ByteBuffer* request, grpc::ByteBuffer* response);
  void GetStatistics(ServerCall* rpc, const v1::GetStatisticsRequest* request,
                     v1::GetStatisticsResponse* response);

  // Registered with a server builder before it starts.
  grpc::Service* grpc_service() { return &async_; }
  // Once the server has started: asks for each method's calls on `queue`
  // (Infer's `hot_calls` ahead). The queue's thread runs the handlers, but
  // `control` LoadGraph's and UnloadGraph's, which may block.
  void Listen(CallQueue queue, int hot_calls, RequestExecutor* control);

  // Infer after its bytes were parsed, without gRPC: checks `wire`, runs it
  // and calls `done` once, with the serialized response on success (null
  // otherwise). `cancelled` as in InferCall. The request fuzzer calls it.
  using InferDone = std::function<void(const absl::Status& status, grpc::ByteBuffer* response)>;
  void StartInfer(WireConvServeRequest wire, std::function<bool()> cancelled, InferDone done);

 private:
  InferenceCore* const core_;
  ServerMetrics* const metrics_;
  const GraphManagementPolicy* const management_;
  ConvServeAsyncService async_;
  // Each method's registration per queue, shared by its calls.
  std::vector<std::shared_ptr<const void>> methods_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
