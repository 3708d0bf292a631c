#include "client/convserve_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_callback.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace convserve {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

ConvServeClient::ConvServeClient(const ClientOptions& options) : options_(options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (!options.load_balancing_policy.empty()) {
    args.SetServiceConfigJSON(
        absl::StrCat(R"({"loadBalancingConfig":[{")", options.load_balancing_policy, R"(":{}}]})"));
  }
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = MakeChannelCredentials(options.tls, &args);
  channel_ = grpc::CreateCustomChannel(options.address, credentials, args);
  convserve_ = v1::ConvServe::NewStub(channel_);
  kserve_ = inference::GRPCInferenceService::NewStub(channel_);
  // The method name the generated stub uses.
  model_infer_bytes_ = std::make_unique<grpc::internal::RpcMethod>(
      "/inference.GRPCInferenceService/ModelInfer", grpc::internal::RpcMethod::NORMAL_RPC,
      channel_);
}

void ConvServeClient::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + options_.timeout);
}

void ConvServeClient::AddGraphManagementToken(grpc::ClientContext* context) const {
  if (options_.graph_management_token.empty()) return;
  context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.graph_management_token));
}

absl::StatusOr<v1::LoadGraphResponse> ConvServeClient::LoadGraph(const v1::GraphDef& graph) {
  v1::LoadGraphRequest request;
  *request.mutable_graph() = graph;
  return LoadGraph(request);
}

absl::StatusOr<v1::LoadGraphResponse> ConvServeClient::LoadGraph(
    const v1::LoadGraphRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options_.load_graph_timeout);
  AddGraphManagementToken(&context);
  v1::LoadGraphResponse response;
  grpc::Status status = convserve_->LoadGraph(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status ConvServeClient::UnloadGraph(const std::string& graph) {
  grpc::ClientContext context;
  Prepare(&context);
  AddGraphManagementToken(&context);
  v1::UnloadGraphRequest request;
  request.set_graph(graph);
  v1::UnloadGraphResponse response;
  return FromGrpcStatus(convserve_->UnloadGraph(&context, request, &response));
}

absl::StatusOr<v1::ListGraphsResponse> ConvServeClient::ListGraphs() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListGraphsResponse response;
  grpc::Status status = convserve_->ListGraphs(&context, v1::ListGraphsRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::GraphInfo> ConvServeClient::GetGraph(const std::string& graph) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetGraphRequest request;
  request.set_graph(graph);
  v1::GetGraphResponse response;
  grpc::Status status = convserve_->GetGraph(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.graph();
}

absl::StatusOr<v1::InferResponse> ConvServeClient::Infer(const v1::InferRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::InferResponse response;
  grpc::Status status = convserve_->Infer(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::GetStatisticsResponse> ConvServeClient::GetStatistics(const std::string& graph) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetStatisticsRequest request;
  request.set_graph(graph);
  v1::GetStatisticsResponse response;
  grpc::Status status = convserve_->GetStatistics(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<bool> ConvServeClient::ServerLive() {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ServerLiveResponse response;
  grpc::Status status = kserve_->ServerLive(&context, inference::ServerLiveRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.live();
}

absl::StatusOr<bool> ConvServeClient::ServerReady() {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ServerReadyResponse response;
  grpc::Status status = kserve_->ServerReady(&context, inference::ServerReadyRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.ready();
}

absl::StatusOr<bool> ConvServeClient::ModelReady(const std::string& model) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelReadyRequest request;
  request.set_name(model);
  inference::ModelReadyResponse response;
  grpc::Status status = kserve_->ModelReady(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.ready();
}

absl::StatusOr<inference::ModelMetadataResponse> ConvServeClient::ModelMetadata(
    const std::string& model) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelMetadataRequest request;
  request.set_name(model);
  inference::ModelMetadataResponse response;
  grpc::Status status = kserve_->ModelMetadata(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<inference::ModelInferResponse> ConvServeClient::ModelInfer(
    const inference::ModelInferRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelInferResponse response;
  grpc::Status status = kserve_->ModelInfer(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status ConvServeClient::SystemSharedMemoryRegister(const std::string& name,
                                                         const std::string& key, uint64_t offset,
                                                         uint64_t byte_size) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse response;
  return FromGrpcStatus(kserve_->SystemSharedMemoryRegister(&context, request, &response));
}

absl::Status ConvServeClient::SystemSharedMemoryUnregister(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(name);
  inference::SystemSharedMemoryUnregisterResponse response;
  return FromGrpcStatus(kserve_->SystemSharedMemoryUnregister(&context, request, &response));
}

absl::StatusOr<inference::SystemSharedMemoryStatusResponse>
ConvServeClient::SystemSharedMemoryStatus(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(name);
  inference::SystemSharedMemoryStatusResponse response;
  grpc::Status status = kserve_->SystemSharedMemoryStatus(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status ConvServeClient::CudaSharedMemoryRegister(const std::string& name,
                                                       const std::string& raw_handle,
                                                       int64_t device_id, uint64_t byte_size) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_raw_handle(raw_handle);
  request.set_device_id(device_id);
  request.set_byte_size(byte_size);
  inference::CudaSharedMemoryRegisterResponse response;
  return FromGrpcStatus(kserve_->CudaSharedMemoryRegister(&context, request, &response));
}

absl::Status ConvServeClient::CudaSharedMemoryUnregister(const std::string& name) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::CudaSharedMemoryUnregisterRequest request;
  request.set_name(name);
  inference::CudaSharedMemoryUnregisterResponse response;
  return FromGrpcStatus(kserve_->CudaSharedMemoryUnregister(&context, request, &response));
}

void ConvServeClient::InferAsync(grpc::ClientContext* context, const v1::InferRequest* request,
                                 v1::InferResponse* response,
                                 std::function<void(grpc::Status)> done) {
  convserve_->async()->Infer(context, request, response, std::move(done));
}

void ConvServeClient::ModelInferAsync(grpc::ClientContext* context,
                                      const inference::ModelInferRequest* request,
                                      inference::ModelInferResponse* response,
                                      std::function<void(grpc::Status)> done) {
  kserve_->async()->ModelInfer(context, request, response, std::move(done));
}

grpc::Status ConvServeClient::InferBlocking(grpc::ClientContext* context,
                                            const v1::InferRequest& request,
                                            v1::InferResponse* response) {
  return convserve_->Infer(context, request, response);
}

grpc::Status ConvServeClient::ModelInferBlocking(grpc::ClientContext* context,
                                                 const inference::ModelInferRequest& request,
                                                 inference::ModelInferResponse* response) {
  return kserve_->ModelInfer(context, request, response);
}

void ConvServeClient::ModelInferBytesAsync(grpc::ClientContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response,
                                           std::function<void(grpc::Status)> done) {
  grpc::internal::CallbackUnaryCall(channel_.get(), *model_infer_bytes_, context, request,
                                    response, std::move(done));
}

grpc::Status ConvServeClient::ModelInferBytesBlocking(grpc::ClientContext* context,
                                                      const grpc::ByteBuffer& request,
                                                      grpc::ByteBuffer* response) {
  return grpc::internal::BlockingUnaryCall(channel_.get(), *model_infer_bytes_, context, request,
                                           response);
}

void ConvServeClient::ModelStreamInfer(
    grpc::ClientContext* context,
    grpc::ClientBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
        reactor) {
  kserve_->async()->ModelStreamInfer(context, reactor);
}

}  // namespace convserve
