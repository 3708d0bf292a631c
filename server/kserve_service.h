// The KServe v2 inference protocol (inference.GRPCInferenceService), so
// KServe and Triton clients work unchanged. Each loaded graph is a model of
// the same name with one version, "1", one input "input" and one output
// "output"; tensor shapes are in byte order (N, H, W, C for NHWC graphs).
#ifndef CONVSERVE_SERVER_KSERVE_SERVICE_H_
#define CONVSERVE_SERVER_KSERVE_SERVICE_H_

#include <functional>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/inference_core.h"
#include "server/server_metrics.h"

namespace convserve {

class KServeService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `core` and `metrics` outlive the service.
  KServeService(InferenceCore* core, ServerMetrics* metrics) : core_(core), metrics_(metrics) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  // Triton's streaming extension; see server/kserve_stream.h.
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

  // One inference, for ModelInfer and each request of a stream: checks the
  // request and queues it; `done` runs once (on a worker thread, or on the
  // caller's for a request refused at once) after `response` holds the
  // result, or only the request's id when `done` gets an error. `request`
  // must stay alive until `done` runs.
  void StartInfer(const inference::ModelInferRequest& request,
                  inference::ModelInferResponse* response, std::function<bool()> cancelled,
                  std::function<void(const absl::Status&)> done);

 private:
  // The graph for a model name and version ("" or "1").
  absl::StatusOr<std::shared_ptr<const Graph>> FindModel(const std::string& name,
                                                         const std::string& version) const;

  InferenceCore* const core_;
  ServerMetrics* const metrics_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_SERVICE_H_
