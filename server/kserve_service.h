// The KServe v2 inference protocol (inference.GRPCInferenceService), so
// KServe and Triton clients work unchanged, with Triton's system and CUDA
// shared-memory extension. Each loaded graph is a model of the same name
// with one version, "1", one input "input" and one output "output"; tensor
// shapes are in byte order (N, H, W, C for NHWC graphs).
#ifndef CONVSERVE_SERVER_KSERVE_SERVICE_H_
#define CONVSERVE_SERVER_KSERVE_SERVICE_H_

#include <functional>
#include <memory>
#include <vector>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/graph_management_policy.h"
#include "server/graph_repository.h"
#include "server/inference_core.h"
#include "server/queued_calls.h"
#include "server/server_metrics.h"
#include "server/shared_memory_registry.h"

namespace convserve {

// The methods on gRPC's completion queues (server/queued_calls.h).
// ModelInfer takes gRPC's raw bytes (server/tensor_wire.h): its tensors are
// copied at most once on the host. Every other call takes messages.
using KServeAsyncService = inference::GRPCInferenceService::WithRawMethod_ModelInfer<
    inference::GRPCInferenceService::AsyncService>;

class KServeService final {
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

  void ServerLive(ServerCall* rpc, const inference::ServerLiveRequest* request,
                  inference::ServerLiveResponse* response);
  void ServerReady(ServerCall* rpc, const inference::ServerReadyRequest* request,
                   inference::ServerReadyResponse* response);
  void ModelReady(ServerCall* rpc, const inference::ModelReadyRequest* request,
                  inference::ModelReadyResponse* response);
  void ServerMetadata(ServerCall* rpc, const inference::ServerMetadataRequest* request,
                      inference::ServerMetadataResponse* response);
  void ModelMetadata(ServerCall* rpc, const inference::ModelMetadataRequest* request,
                     inference::ModelMetadataResponse* response);
  void ModelInfer(ServerCall* rpc, const grpc::ByteBuffer* request, grpc::ByteBuffer* response);

  // Triton's shared-memory extension (server/shared_memory_registry.h).
  void SystemSharedMemoryStatus(ServerCall* rpc,
                                const inference::SystemSharedMemoryStatusRequest* request,
                                inference::SystemSharedMemoryStatusResponse* response);
  void SystemSharedMemoryRegister(ServerCall* rpc,
                                  const inference::SystemSharedMemoryRegisterRequest* request,
                                  inference::SystemSharedMemoryRegisterResponse* response);
  void SystemSharedMemoryUnregister(ServerCall* rpc,
                                    const inference::SystemSharedMemoryUnregisterRequest* request,
                                    inference::SystemSharedMemoryUnregisterResponse* response);
  void CudaSharedMemoryStatus(ServerCall* rpc,
                              const inference::CudaSharedMemoryStatusRequest* request,
                              inference::CudaSharedMemoryStatusResponse* response);
  void CudaSharedMemoryRegister(ServerCall* rpc,
                                const inference::CudaSharedMemoryRegisterRequest* request,
                                inference::CudaSharedMemoryRegisterResponse* response);
  void CudaSharedMemoryUnregister(ServerCall* rpc,
                                  const inference::CudaSharedMemoryUnregisterRequest* request,
                                  inference::CudaSharedMemoryUnregisterResponse* response);
  // Triton's model configuration, statistics and model repository
  // extensions (server/kserve_model_control.cc). RepositoryIndex lists the
  // loaded graphs and those of --graph_dir, RepositoryModelUnload unloads
  // one, RepositoryModelLoad loads one from --graph_dir (a loaded one is a
  // no-op) and otherwise says how to load one (FAILED_PRECONDITION).
  void ModelConfig(ServerCall* rpc, const inference::ModelConfigRequest* request,
                   inference::ModelConfigResponse* response);
  void ModelStatistics(ServerCall* rpc, const inference::ModelStatisticsRequest* request,
                       inference::ModelStatisticsResponse* response);
  void RepositoryIndex(ServerCall* rpc, const inference::RepositoryIndexRequest* request,
                       inference::RepositoryIndexResponse* response);
  void RepositoryModelLoad(ServerCall* rpc, const inference::RepositoryModelLoadRequest* request,
                           inference::RepositoryModelLoadResponse* response);
  void RepositoryModelUnload(ServerCall* rpc,
                             const inference::RepositoryModelUnloadRequest* request,
                             inference::RepositoryModelUnloadResponse* response);
  // Triton's trace and logging extensions are not served: UNIMPLEMENTED with
  // what to use instead (gRPC's own answer for an unserved method has no
  // message).
  void TraceSetting(ServerCall* rpc, const inference::TraceSettingRequest* request,
                    inference::TraceSettingResponse* response);
  void LogSettings(ServerCall* rpc, const inference::LogSettingsRequest* request,
                   inference::LogSettingsResponse* response);

  // Registered with a server builder before it starts.
  grpc::Service* grpc_service() { return &async_; }
  // Once the server has started: asks for each method's calls on `queue`
  // (ModelInfer's `hot_calls` ahead, the others' one or two). The queue's
  // thread runs the handlers, but `control` those that may block
  // (registering memory, loading and unloading).
  void Listen(CallQueue queue, int hot_calls, RequestExecutor* control);

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
  KServeAsyncService async_;
  // Each method's registration per queue, shared by its calls.
  std::vector<std::shared_ptr<const void>> methods_;
};

}  // namespace convserve

#endif  // CONVSERVE_SERVER_KSERVE_SERVICE_H_
