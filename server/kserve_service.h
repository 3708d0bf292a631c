// The KServe v2 inference protocol (inference.GRPCInferenceService), so
// KServe and Triton clients work unchanged, with Triton's system and CUDA
// shared-memory extension. Each loaded graph is a model of the same name
// with one version, "1", one input "input" and one output "output"; tensor
// shapes are in byte order (N, H, W, C for NHWC graphs).
#ifndef CONVSERVE_SERVER_KSERVE_SERVICE_H_
#define CONVSERVE_SERVER_KSERVE_SERVICE_H_

#include <functional>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/graph_management_policy.h"
#include "server/graph_repository.h"
#include "server/inference_core.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"

namespace convserve {

// ModelInfer takes gRPC's raw bytes (server/tensor_wire.h): its tensors are
// copied at most once on the host. Every other call takes messages.
using KServeServiceBase = inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
    inference::GRPCInferenceService::CallbackService>;

class KServeService final : public KServeServiceBase {
 public:
  // `core`, `metrics`, `shared_memory`, `management` and `repository`
  // outlive the service; `management` decides who may call
  // RepositoryModelLoad and RepositoryModelUnload, `repository` (null when
  // the server has no --graph_dir) is where RepositoryModelLoad finds graphs.
  KServeService(InferenceCore* core, ServerMetrics* metrics, SharedMemoryRegistry* shared_memory,
                const GraphManagementPolicy* management, const GraphRepository* repository)
      : core_(core),
        metrics_(metrics),
        shared_memory_(shared_memory),
        management_(management),
        repository_(repository) {}

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
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

  // Triton's shared-memory extension (server/shared_memory_registry.h).
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;
  // Triton's model configuration, statistics and model repository
  // extensions (server/kserve_model_control.cc). RepositoryIndex lists the
  // loaded graphs and those of --graph_dir, RepositoryModelUnload unloads
  // one, RepositoryModelLoad loads one from --graph_dir (a loaded one is a
  // no-op) and otherwise says how to load one (FAILED_PRECONDITION).
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;
  // Triton's trace and logging extensions are not served: UNIMPLEMENTED with
  // what to use instead (gRPC's own answer for an unserved method has no
  // message).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override;

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

  // The same with the tensors in host buffers (the raw ModelInfer path):
  // `raw_inputs` are the request's raw_input_contents read off the wire (or
  // null), and, unless the request names an output region, the output is
  // written to a host buffer handed to `done` (else `done` gets null).
  using BufferDone = std::function<void(const absl::Status&, const TensorMemory* output)>;
  void StartInfer(const inference::ModelInferRequest& request,
                  const std::vector<TensorMemory>* raw_inputs,
                  inference::ModelInferResponse* response, std::function<bool()> cancelled,
                  BufferDone done);

 private:
  // The graph for a model name and version ("" or "1").
  absl::StatusOr<std::shared_ptr<const Graph>> FindModel(const std::string& name,
                                                         const std::string& version) const;

  InferenceCore* const core_;
  ServerMetrics* const metrics_;
  SharedMemoryRegistry* const shared_memory_;
  const GraphManagementPolicy* const management_;
  const GraphRepository* const repository_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_SERVICE_H_
