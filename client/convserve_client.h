// A blocking C++ client for a convserve server: the convserve.v1 admin and
// Infer calls and the KServe v2 calls. gRPC errors come back as absl::Status
// with the server's code and message. Thread-safe (gRPC stubs are).
#ifndef CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_
#define CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/channel_credentials.h"
#include "convserve/v1/convserve.grpc.pb.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace convserve {

struct ClientOptions {
  // A gRPC target: host:port, or a resolver URI such as dns:///name:port.
  std::string address = "localhost:8001";
  // Client-side load balancing across the addresses the target resolves to,
  // e.g. "round_robin"; empty keeps gRPC's default (pick_first). Set through
  // the channel's default service config.
  std::string load_balancing_policy;
  // Largest message sent or received.
  int max_message_bytes = 256 << 20;
  // Deadline of each call but LoadGraph.
  std::chrono::milliseconds timeout{60000};
  // Deadline of LoadGraph, which waits for the graph's warm-up (plans built
  // on every GPU; engine searches may take minutes on a fresh plan store).
  std::chrono::milliseconds load_graph_timeout{600000};
  // TLS or mutual TLS; plain text by default.
  ClientTlsOptions tls;
  // Sent as `authorization: Bearer <token>` on LoadGraph and UnloadGraph
  // (a server with --graph_management=token); empty sends none.
  std::string graph_management_token;
  // A TCP connection of this client's own instead of the one gRPC shares
  // among channels with equal arguments to the same target (one HTTP/2
  // connection is served by one thread at a time on each side).
  bool own_connection = false;
};

class ConvServeClient {
 public:
  explicit ConvServeClient(const ClientOptions& options);

  absl::StatusOr<v1::LoadGraphResponse> LoadGraph(const v1::GraphDef& graph);
  // With every field of the request (e.g. dynamic_batching).
  absl::StatusOr<v1::LoadGraphResponse> LoadGraph(const v1::LoadGraphRequest& request);
  absl::Status UnloadGraph(const std::string& graph);
  absl::StatusOr<v1::ListGraphsResponse> ListGraphs();
  absl::StatusOr<v1::GraphInfo> GetGraph(const std::string& graph);
  absl::StatusOr<v1::InferResponse> Infer(const v1::InferRequest& request);
  // Cumulative per-graph statistics; `graph` empty for every graph.
  absl::StatusOr<v1::GetStatisticsResponse> GetStatistics(const std::string& graph);

  absl::StatusOr<bool> ServerLive();
  // KServe readiness: false while a graph warms up (ServerReady) or for a
  // graph that is not loaded or not READY (ModelReady).
  absl::StatusOr<bool> ServerReady();
  absl::StatusOr<bool> ModelReady(const std::string& model);
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(const std::string& model);
  absl::StatusOr<inference::ModelInferResponse> ModelInfer(
      const inference::ModelInferRequest& request);

  // Triton's shared-memory extension: regions the server maps (system: a
  // POSIX shared memory object; CUDA: an IPC handle of device memory).
  absl::Status SystemSharedMemoryRegister(const std::string& name, const std::string& key,
                                          uint64_t offset, uint64_t byte_size);
  // `name` empty: every system region.
  absl::Status SystemSharedMemoryUnregister(const std::string& name);
  absl::StatusOr<inference::SystemSharedMemoryStatusResponse> SystemSharedMemoryStatus(
      const std::string& name);
  absl::Status CudaSharedMemoryRegister(const std::string& name, const std::string& raw_handle,
                                        int64_t device_id, uint64_t byte_size);
  absl::Status CudaSharedMemoryUnregister(const std::string& name);

  // Non-blocking Infer / ModelInfer on gRPC's callback API: `done` runs once,
  // on a gRPC thread, when the call ends. `context` (with its deadline
  // already set by the caller), `request` and `response` must stay alive
  // until then.
  void InferAsync(grpc::ClientContext* context, const v1::InferRequest* request,
                  v1::InferResponse* response, std::function<void(grpc::Status)> done);
  void ModelInferAsync(grpc::ClientContext* context, const inference::ModelInferRequest* request,
                       inference::ModelInferResponse* response,
                       std::function<void(grpc::Status)> done);
  // Blocking Infer / ModelInfer on gRPC's synchronous API: the call runs on
  // the calling thread (no hand-off to a gRPC thread when it ends).
  // `context` carries the caller's deadline.
  grpc::Status InferBlocking(grpc::ClientContext* context, const v1::InferRequest& request,
                             v1::InferResponse* response);
  grpc::Status ModelInferBlocking(grpc::ClientContext* context,
                                  const inference::ModelInferRequest& request,
                                  inference::ModelInferResponse* response);
  // ModelInfer with request and response as serialized bytes
  // (model_infer_bytes.h), callback and blocking as above: no protobuf
  // (de)serialization of the tensors on this side.
  void ModelInferBytesAsync(grpc::ClientContext* context, const grpc::ByteBuffer* request,
                            grpc::ByteBuffer* response, std::function<void(grpc::Status)> done);
  grpc::Status ModelInferBytesBlocking(grpc::ClientContext* context,
                                       const grpc::ByteBuffer& request,
                                       grpc::ByteBuffer* response);
  // Starts a ModelStreamInfer call driven by `reactor` (which then calls
  // StartCall); `context` carries no deadline unless the caller set one.
  void ModelStreamInfer(grpc::ClientContext* context,
                        grpc::ClientBidiReactor<inference::ModelInferRequest,
                                                inference::ModelStreamInferResponse>* reactor);

  const ClientOptions& options() const { return options_; }

 private:
  void Prepare(grpc::ClientContext* context) const;
  // The graph management token as metadata (LoadGraph, UnloadGraph).
  void AddGraphManagementToken(grpc::ClientContext* context) const;

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ConvServe::Stub> convserve_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
  // KServe's ModelInfer, registered with the channel, for the byte calls.
  std::unique_ptr<grpc::internal::RpcMethod> model_infer_bytes_;
};

// gRPC status -> absl::Status, same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace convserve

#endif  // CONVSERVE_CLIENT_CONVSERVE_CLIENT_H_
