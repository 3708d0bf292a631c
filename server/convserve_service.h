// convserve.v1.ConvServe over gRPC's callback API. Inference is handed to the
// core's workers; gRPC threads only translate and queue.
#ifndef CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
#define CONVSERVE_SERVER_CONVSERVE_SERVICE_H_

#include "convserve/v1/convserve.grpc.pb.h"
#include "server/inference_core.h"

namespace convserve {

class ConvServeService final : public v1::ConvServe::CallbackService {
 public:
  // `core` outlives the service (both are owned by GrpcServer's owner).
  explicit ConvServeService(InferenceCore* core) : core_(core) {}

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
                                  const v1::InferRequest* request,
                                  v1::InferResponse* response) override;

 private:
  InferenceCore* const core_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_CONVSERVE_SERVICE_H_
